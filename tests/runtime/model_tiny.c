/* model_tiny.c - a hand-written model in the form ampc's C backend emits
 * (runtime/program.h), so the training driver can be built and tested
 * without the code generator: an MLP 64-32-10 on 8x8 inputs,
 *
 *   data [N,1,8,8] -> cast -> FullyConnected(32) -> relu -> FullyConnected(10)
 *        -> cast to fp32 -> SoftmaxOutput (normalization null)
 *
 * in three storage dtypes: fp32 (ampc_model; the casts are copies), and
 * fp16 / bf16 with fp32 masters (tiny_model_f16, tiny_model_bf16), the
 * shape AMP gives it.  Linked with the runtime it is a complete training
 * program:  cc tests/runtime/model_tiny.c build/libampcrt.a -lopenblas -lz -lm
 */
#include "model_tiny.h"

enum {
    B_DATA, B_LABEL, B_W1, B_B1, B_W2, B_B2,
    B_X, B_H1, B_A1, B_LOGITS, B_LOGITS32, B_PROB,
    B_DLOGITS32, B_DLOGITS, B_DA1, B_DH1,
    B_GW1, B_GB1, B_GW2, B_GB2, B_PROB_INFER, B_COUNT
};

#define IN 64
#define HID 32
#define OUT 10

#define BUFFERS(DT)                                                                          \
    {                                                                                        \
        [B_DATA] = {"data", RT_F32, 0, IN, false, 0, 0},           [B_LABEL] = {"softmax_label", RT_F32, 0, 1, false, 0, 0}, \
        [B_W1] = {"fc1_weight", DT, HID * IN, 0, false, 0, 0},     [B_B1] = {"fc1_bias", DT, HID, 0, false, 0, 0},         \
        [B_W2] = {"fc2_weight", DT, OUT * HID, 0, false, 0, 0},    [B_B2] = {"fc2_bias", DT, OUT, 0, false, 0, 0},         \
        [B_X] = {"data_cast", DT, 0, IN, false, 0, 0},             [B_H1] = {"fc1", DT, 0, HID, false, 0, 0},              \
        [B_A1] = {"relu1", DT, 0, HID, false, 0, 0},               [B_LOGITS] = {"fc2", DT, 0, OUT, false, 0, 0},          \
        [B_LOGITS32] = {"fc2_cast", RT_F32, 0, OUT, false, 0, 0},  [B_PROB] = {"softmax", RT_F32, 0, OUT, false, 0, 0},    \
        [B_DLOGITS32] = {"fc2_cast_grad", RT_F32, 0, OUT, false, 0, 0},                                      \
        [B_DLOGITS] = {"fc2_grad", DT, 0, OUT, false, 0, 0},       [B_DA1] = {"relu1_grad", DT, 0, HID, false, 0, 0},      \
        [B_DH1] = {"fc1_grad", DT, 0, HID, false, 0, 0},           [B_GW1] = {"fc1_weight_grad", DT, HID * IN, 0, false, 0, 0}, \
        [B_GB1] = {"fc1_bias_grad", DT, HID, 0, false, 0, 0},      [B_GW2] = {"fc2_weight_grad", DT, OUT * HID, 0, false, 0, 0}, \
        [B_GB2] = {"fc2_bias_grad", DT, OUT, 0, false, 0, 0},      [B_PROB_INFER] = {"softmax_infer", RT_F32, 0, OUT, false, 0, 0}, \
    }

/* wd_mult as the compiler emits it: MXNet's 0 for biases */
#define PARAMS(DT, MASTER)                                                                   \
    {                                                                                        \
        {"fc1_weight", RT_PK_WEIGHT, DT, MASTER, 2, {HID, IN}, HID * IN, "default", 1, 1, B_W1, B_GW1, RT_LAYOUT_NCHW}, \
        {"fc1_bias", RT_PK_BIAS, DT, MASTER, 1, {HID}, HID, "default", 0, 1, B_B1, B_GB1, RT_LAYOUT_NCHW},    \
        {"fc2_weight", RT_PK_WEIGHT, DT, MASTER, 2, {OUT, HID}, OUT * HID, "default", 1, 1, B_W2, B_GW2, RT_LAYOUT_NCHW}, \
        {"fc2_bias", RT_PK_BIAS, DT, MASTER, 1, {OUT}, OUT, "default", 0, 1, B_B2, B_GB2, RT_LAYOUT_NCHW},    \
    }

static const char *const tiny_defaults[] = {
    "batch_size=32", "epochs=20", "lr=0.1", "optimizer=sgd(momentum=0.9, wd=0.0001)",
    "init=xavier()", "data=digits", "amp=off", NULL,
};

/* A workspace large enough for every kernel call of the steps. */
static void *ws(RtCtx *ctx, RtDType dt)
{
    int n = (int)ctx->batch;
    RtFcDims d1 = {.n = n, .in = IN, .hidden = HID}, d2 = {.n = n, .in = HID, .hidden = OUT};
    size_t need = 0;
    for (int p = RT_PASS_FORWARD; p <= RT_PASS_BACKWARD_WEIGHT; p++) {
        size_t a = rt_fc_workspace_bytes(&d1, dt, (RtPass)p), b = rt_fc_workspace_bytes(&d2, dt, (RtPass)p);
        need = a > need ? a : need;
        need = b > need ? b : need;
    }
    return need ? rt_ctx_ws(ctx, need) : NULL;
}

/* As generated code does: the driver's hook after each node (--check-numerics). */
#define AFTER(node, buf, name)                                                               \
    do {                                                                                     \
        if (ctx->after_node)                                                                 \
            ctx->after_node(ctx, node, name, "op", buf);                                     \
    } while (0)

static void forward(RtCtx *ctx, RtDType dt, int prob)
{
    void **b = ctx->buf;
    int64_t n = ctx->batch;
    RtFcDims d1 = {.n = (int)n, .in = IN, .hidden = HID}, d2 = {.n = (int)n, .in = HID, .hidden = OUT};
    void *w = ws(ctx, dt);
    rt_cast_forward((size_t)(n * IN), RT_F32, b[B_DATA], dt, b[B_X]);
    AFTER(0, B_X, "data_cast");
    rt_fc_forward(&d1, dt, b[B_X], b[B_W1], b[B_B1], b[B_H1], w);
    AFTER(1, B_H1, "fc1");
    rt_activation_forward(RT_ACT_RELU, (size_t)(n * HID), dt, b[B_H1], b[B_A1]);
    AFTER(2, B_A1, "relu1");
    rt_fc_forward(&d2, dt, b[B_A1], b[B_W2], b[B_B2], b[B_LOGITS], w);
    AFTER(3, B_LOGITS, "fc2");
    rt_cast_forward((size_t)(n * OUT), dt, b[B_LOGITS], RT_F32, b[B_LOGITS32]);
    AFTER(4, B_LOGITS32, "fc2_cast");
    rt_softmax_output_forward(n, OUT, RT_F32, b[B_LOGITS32], RT_F32, b[prob]);
    AFTER(5, prob, "softmax");
}

static void train_step(RtCtx *ctx, RtDType dt)
{
    void **b = ctx->buf;
    int64_t n = ctx->batch;
    RtFcDims d1 = {.n = (int)n, .in = IN, .hidden = HID}, d2 = {.n = (int)n, .in = HID, .hidden = OUT};
    RtSmoParams smo = {.grad_scale = 1, .smooth_alpha = 0, .use_ignore = false,
                       .ignore_label = -1, .normalization = RT_SMO_NORM_NULL};
    forward(ctx, dt, B_PROB);
    void *w = ws(ctx, dt);
    rt_softmax_output_backward(n, OUT, RT_F32, b[B_PROB], b[B_LABEL], &smo, ctx->step_state, RT_F32,
                               b[B_DLOGITS32], false);
    AFTER(6, B_DLOGITS32, "fc2_cast_grad");
    rt_cast_backward((size_t)(n * OUT), RT_F32, b[B_DLOGITS32], dt, b[B_DLOGITS], false);
    AFTER(7, B_DLOGITS, "fc2_grad");
    rt_fc_backward_weight(&d2, dt, b[B_A1], b[B_DLOGITS], b[B_GW2], b[B_GB2], false, w);
    rt_fc_backward_data(&d2, dt, b[B_W2], b[B_DLOGITS], b[B_DA1], false, w);
    AFTER(8, B_DA1, "relu1_grad");
    rt_activation_backward(RT_ACT_RELU, (size_t)(n * HID), dt, NULL, b[B_A1], b[B_DA1], b[B_DH1],
                           false);
    AFTER(9, B_DH1, "fc1_grad");
    rt_fc_backward_weight(&d1, dt, b[B_X], b[B_DH1], b[B_GW1], b[B_GB1], false, w);
}

static void no_moving(RtCtx *ctx) { (void)ctx; }

static void train_f32(RtCtx *ctx) { train_step(ctx, RT_F32); }
static void infer_f32(RtCtx *ctx) { forward(ctx, RT_F32, B_PROB_INFER); }
static void train_f16(RtCtx *ctx) { train_step(ctx, RT_F16); }
static void infer_f16(RtCtx *ctx) { forward(ctx, RT_F16, B_PROB_INFER); }
static void train_bf16(RtCtx *ctx) { train_step(ctx, RT_BF16); }
static void infer_bf16(RtCtx *ctx) { forward(ctx, RT_BF16, B_PROB_INFER); }

static const RtBuffer buf_f32[B_COUNT] = BUFFERS(RT_F32);
static const RtBuffer buf_f16[B_COUNT] = BUFFERS(RT_F16);
static const RtBuffer buf_bf16[B_COUNT] = BUFFERS(RT_BF16);
static const RtParam par_f32[] = PARAMS(RT_F32, false);
static const RtParam par_f16[] = PARAMS(RT_F16, true);
static const RtParam par_bf16[] = PARAMS(RT_BF16, true);

#define MODEL(NAME, P, B, AMP, TRAIN, INFER)                                                 \
    {                                                                                        \
        .name = NAME, .nparams = 4, .params = P, .nbuffers = B_COUNT, .buffers = B,          \
        .data = B_DATA, .label = B_LABEL, .prob_train = B_PROB, .prob_infer = B_PROB_INFER,  \
        .data_rank = 3, .data_shape = {1, 8, 8}, .classes = OUT, .amp = AMP,                 \
        .train_defaults = tiny_defaults, .train_step = TRAIN, .moving_update = no_moving,     \
        .infer_step = INFER,                                                                 \
    }

const RtModel ampc_model = MODEL("tiny_mlp", par_f32, buf_f32, "off", train_f32, infer_f32);
const RtModel tiny_model_f16 = MODEL("tiny_mlp_f16", par_f16, buf_f16, "float16", train_f16, infer_f16);
const RtModel tiny_model_bf16 = MODEL("tiny_mlp_bf16", par_bf16, buf_bf16, "bfloat16", train_bf16,
                                      infer_bf16);
