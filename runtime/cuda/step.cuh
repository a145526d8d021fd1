/*
 * step.cuh - the one-thread kernels of the step without the host (the CUDA
 * device's loss-scale block, runtime/cuda/device.cu; device.h, "the step
 * without the host"), in one source for nvcc (kernels.cu builds it after
 * kernels.cuh) and the emulator (the same kernels.cu in libampcemu.a;
 * tests/runtime/test_cuda_emu.c runs them against the CPU device's rules).
 * The loss scale's own rule (kernels/lossscale.h) on the device:
 * ampc_k_loss_scale.
 */
#ifndef AMPC_CUDA_STEP_CUH
#define AMPC_CUDA_STEP_CUH

#ifndef AMPC_CUDA_KERNELS_CUH
#error "include cuda/kernels.cuh before cuda/step.cuh"
#endif

/* One thread: the rule of kernels/lossscale.h on the device flag, so the
 * scale the next step uses never passes through the host. */
__global__ void ampc_k_loss_scale(ampc_dptr<AmpcLossScale> state, ampc_dptr<const int32_t> found,
                                  AmpcLossScaleRule rule, ampc_dptr<AmpcLossScaleStats> stats)
{
    if (blockIdx.x != 0 || threadIdx.x != 0)
        return;
    AmpcLossScale old = *state;
    int inf = *found != 0;
    AmpcLossScale now = ampc_loss_scale_update(old, inf, rule);
    *state = now;
    if (stats) {
        AmpcLossScaleStats c = *stats;
        c.steps++;
        c.skipped += inf;
        c.grown += now.scale > old.scale;
        c.backed_off += now.scale < old.scale;
        *stats = c;
    }
}

/* The step's scale: the device's, or inf (--inject-inf-at-step: the host's
 * flag, or the step's number the device was told at ls_init, which a CUDA
 * graph replays unfrozen). */
__global__ void ampc_k_step_begin(ampc_dptr<AmpcDevLs> s, int inject)
{
    if (blockIdx.x != 0 || threadIdx.x != 0)
        return;
    AmpcLossScale ls = *AMPC_FIELD(s, ls);
    int at = *AMPC_FIELD(s, inject) &&
             (int64_t)*AMPC_FIELD(s, st.step) == *AMPC_FIELD(s, inject_at);
    *AMPC_FIELD(s, st.scale) = inject || at ? __int_as_float(0x7f800000) : ls.scale;
}

/* This update's scalars: the schedule's entry for the device's update
 * count (a NaN learning rate when the host did not write that far). */
__global__ void ampc_k_step_pick(ampc_dptr<const AmpcDevLs> s, ampc_dptr<const AmpcMtStep> table,
                                 ampc_dptr<AmpcMtStep> cur)
{
    if (blockIdx.x != 0 || threadIdx.x != 0)
        return;
    int64_t i = *AMPC_FIELD(s, st.num_update) - *AMPC_FIELD(s, lr_first);
    if (i >= 0 && i < *AMPC_FIELD(s, lr_n)) {
        *cur = table[i];
    } else {
        AmpcMtStep c = table[0];
        c.lr = __int_as_float(0x7fc00000);
        *cur = c;
    }
}

/* After the update: counted when it was applied (always, unless dynamic). */
__global__ void ampc_k_step_count(ampc_dptr<AmpcDevLs> s, ampc_dptr<const int32_t> flag)
{
    if (blockIdx.x == 0 && threadIdx.x == 0 && (!*AMPC_FIELD(s, st.dynamic) || *flag == 0))
        *AMPC_FIELD(s, st.num_update) += 1;
}

/* The step's record into the ring (after the rule: the flag, 1 when
 * finite, the scale and tracker the next step uses, the update count); a
 * non-finite step counted when not dynamic (ampc_k_loss_scale counts the
 * dynamic skips). */
__global__ void ampc_k_step_ring(ampc_dptr<AmpcDevLs> s, ampc_dptr<const int32_t> flag,
                                 ampc_dptr<AmpcLossScaleStep> ring, int64_t ring_len)
{
    if (blockIdx.x != 0 || threadIdx.x != 0)
        return;
    int64_t steps = *AMPC_FIELD(s, steps);
    int32_t f = *flag;
    ampc_dptr<AmpcLossScaleStep> r = ring + steps % ring_len;
    *AMPC_FIELD(r, s) = *AMPC_FIELD(s, ls);
    *AMPC_FIELD(r, num_update) = *AMPC_FIELD(s, st.num_update);
    *AMPC_FIELD(r, finite) = f == 0;
    *AMPC_FIELD(s, steps) = steps + 1;
    if (!*AMPC_FIELD(s, st.dynamic))
        *AMPC_FIELD(s, nonfinite) += f != 0;
    *AMPC_FIELD(s, st.step) += 1; /* the next step's number (Dropout's counter) */
}

AMPC_CU_API int ampc_cu_loss_scale(AmpcStream s, AmpcLossScale *state, const int32_t *found,
                                   AmpcLossScaleRule rule, AmpcLossScaleStats *stats)
{
    AMPC_LAUNCH(ampc_k_loss_scale, 1, 1, s, state, found, rule, stats);
    return AMPC_LAUNCH_ERROR();
}

AMPC_API int ampc_cu_step_begin(AmpcStream s, AmpcDevLs *ls, int inject)
{
    AMPC_LAUNCH(ampc_k_step_begin, 1, 1, s, ls, inject);
    return AMPC_LAUNCH_ERROR();
}

AMPC_API int ampc_cu_step_pick(AmpcStream s, const AmpcDevLs *ls, const AmpcMtStep *table,
                               AmpcMtStep *cur)
{
    AMPC_LAUNCH(ampc_k_step_pick, 1, 1, s, ls, table, cur);
    return AMPC_LAUNCH_ERROR();
}

AMPC_API int ampc_cu_step_count(AmpcStream s, AmpcDevLs *ls, const int32_t *flag)
{
    AMPC_LAUNCH(ampc_k_step_count, 1, 1, s, ls, flag);
    return AMPC_LAUNCH_ERROR();
}

AMPC_API int ampc_cu_step_ring(AmpcStream s, AmpcDevLs *ls, const int32_t *flag,
                               AmpcLossScaleStep *ring, int64_t ring_len)
{
    AMPC_LAUNCH(ampc_k_step_ring, 1, 1, s, ls, flag, ring, ring_len);
    return AMPC_LAUNCH_ERROR();
}

#endif /* AMPC_CUDA_STEP_CUH */
