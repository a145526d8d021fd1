/* codegen.h - the code generation layer: from the training graph (after
 * train-cast-elide) to a program.
 *
 * lower.c decides the program (plan.h: its buffers and calls, in a static
 * order); the one C emitter (emit_c.c) writes it, for either target, as a C
 * file that defines the RtModel of runtime/program.h (a parameter table, a
 * buffer table and step functions), each call naming the function of the
 * kernel table's column for the target (ir/kernels.def, CgPlans.kernels);
 * build.c compiles it against the runtime into an executable. */
#ifndef AMPC_CODEGEN_H
#define AMPC_CODEGEN_H

#include "../ir/ir.h"
#include "../ir/plan.h"

/* emit_c.c: whether the backend can run `train` (after autodiff, its inference
 * graph in train->infer): a loss head, data and label inputs, only dtypes
 * it has kernels for, and sizes that fit int64.  False after reporting the
 * first problem (at its node) through the graph's Diag. */
bool cg_check(const Graph *train);

/* The memory plans of the two steps (passes/memplan.c), verified; both
 * NULL: every value its own buffer (--no-memplan).  kv: the kvstore pass's
 * placement of the program lowered with these plans (NULL: none); the pass
 * decides the buckets, and a dist_sync or nccl one gives the emitted RtModel
 * them (RtModel.kv_*). */
typedef struct {
    const BufferPlan *train, *infer;
    const KvPlan *kv;
    Target kernels;  /* whose functions the calls name: the table's cpu or cuda
                      * column (ampc --target; --kernels=cpu runs a CUDA plan on
                      * the CPU runtime) */
} CgPlans;

/* lower.c: the lowered program of `train` (after cg_check) with the plans
 * (NULL: every value its own buffer); *out is the caller's (program_free). */
void lower(const Graph *train, const CgPlans *plans, Program *out);
/* Whether calls of op k ask for the workspace. */
bool lower_takes_workspace(OpKind k);

/* emit_c.c: writes the program's C source, after cg_check (false, with nothing
 * written, when that fails), placing values as plans say (NULL: none).
 * Every string from the model is written as an escaped C string literal, so
 * the file is well-formed C whatever the names hold. */
bool cg_emit_c(FILE *out, const Graph *train, const CgPlans *plans);
/* Writes the program's build id into the emitted C text (in place, the same
 * length): FNV-1a 64 of the text as cg_emit_c wrote it (the id's zeros in
 * place) and of AMPC_VERSION; the ranks of a run compare it at start-up
 * (runtime/rankcheck.h). */
void cg_stamp_build_id(char *text, size_t len);
/* From now on cg_emit_c writes the model's hash (the SHA-256 of its input
 * files, as the dumps' provenance has it) into the program's RtModel, for
 * its --version (NULL or "": none). */
void cg_emit_set_model_hash(const char *model_hash);

/* build.c: compiles a C file into an executable with $CC (default cc) and
 * $CFLAGS (default -O2), against the runtime found next to ampc (the build
 * tree or an installed prefix; $AMPC_RUNTIME_DIR overrides). */
bool cg_build(Diag *d, const char *c_file, const char *exe, const char *argv0);
/* From now on cg_build links the MPI engine (ampcmpi.o and Open MPI through
 * $MPICC, default mpicc): ampc --mpi. */
void cg_build_set_mpi(bool on);
/* From now on cg_build links the CUDA runtime (libampccuda.a beside the
 * runtime, the toolkit's static cudart; cuDNN, cuBLASLt and NCCL are
 * opened at run time): a program whose calls name the cuda column. */
void cg_build_set_cuda(bool on);
/* From now on cg_build passes these flags (-O0..-O3, -g: ampc's own, "" for
 * none) to the C compiler after $CFLAGS, so they win over its -O. */
void cg_build_set_cflags(const char *flags);
/* From now on cg_build defines AMPC_BUILT_WITH as this text (ampc's command
 * line, for the program's --version; NULL: not defined). */
void cg_build_set_command_line(const char *text);
/* Whether this machine can run a CUDA program ampc builds: the CUDA runtime
 * library found beside the runtime (as cg_build looks for it), the driver
 * (libcuda.so.1) loads and reports at least one device.  False with the
 * reason in why (when not NULL).  --target=auto asks it. */
bool cg_cuda_usable(const char *argv0, char *why, size_t whylen);

/* output.c: the files a compile writes, never destroying one on a failure
 * (see output.c for the rules).  True (after an error naming both) when out
 * is the same file as one of the inputs read into d. */
bool cg_output_is_input(Diag *d, const char *out);
/* Writes data to path: a regular file through a temporary file beside it
 * and a rename, a device or FIFO in place. */
bool cg_write_file(Diag *d, const char *path, const char *data, size_t len);
/* The same for an input the user asks ampc to rewrite (--expect-update):
 * without the refusal of an input, still atomic. */
bool cg_rewrite_file(Diag *d, const char *path, const char *data, size_t len);
/* Compiles the C source c_text (written to a private temporary directory)
 * into the program exe, which is replaced only when the build succeeds. */
bool cg_build_program(Diag *d, const char *c_text, size_t len, const char *exe, const char *argv0);

#endif
