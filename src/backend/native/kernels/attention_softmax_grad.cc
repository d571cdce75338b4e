// Attention's softmax backward, ds = p⊙(dp − Σ_d dout⊙out), in one pass where the composed form runs four ops (src/model/
// attention/softmax.ts; its forward is the composed softmax or the whole causal attention, causal_attention.cc).
// Test: test/backend/fused-ops.test.ts, "softmax attention" (the non-causal cases run it).
#include "kernel.h"

namespace slayformer {
namespace {

// p, dp [.., Lq, Lk], dout, out [.., Lq, D] → ds = p⊙(dp − Σ_d dout⊙out): the softmax backward with
// the row term from O = P·V (src/model/attention/softmax.ts), four composed ops in one pass.
void attentionSoftmaxBackward(void*, TF_OpKernelContext* ctx) {
  KernelCall call(ctx);
  TF_Status* status = call.status;
  TF_Tensor* probs = call.input(0);
  TF_Tensor* dprobs = call.input(1);
  TF_Tensor* dout = call.input(2);
  TF_Tensor* out = call.input(3);
  TF_Tensor* dscores = nullptr;
  InputShapes shapes("SlayformerAttentionSoftmaxGrad", status);
  if (shapes.match({{"probs", probs, "... Lq Lk"}, {"dprobs", dprobs, "... Lq Lk"}, {"dout", dout, "... Lq D"}, {"out", out, "... Lq D"}}))
    dscores = call.output(0, dimsOf(probs));
  if (TF_GetCode(status) == TF_OK) {
    const int64_t lk = shapes["Lk"], d = shapes["D"];
    int64_t rows = 1;  // the leading axes and Lq, counted from the shape: Lk or D may be 0
    for (int i = 0; i < TF_NumDims(probs) - 1; i++) rows *= TF_Dim(probs, i);
    const float *p = data(probs), *dp = data(dprobs), *go = data(dout), *o = data(out);
    float* ds = data(dscores);
    parallelRows(rows, lk + d, [&](int64_t begin, int64_t end) {
      for (int64_t row = begin; row < end; row++) {
        const float term = laneSum(d, [&](int64_t j) { return go[row * d + j] * o[row * d + j]; });
        const float* pr = p + row * lk;
        const float* dpr = dp + row * lk;
        float* dsr = ds + row * lk;
        for (int64_t j = 0; j < lk; j++) dsr[j] = pr[j] * (dpr[j] - term);
      }
    });
  }
}

}  // namespace

SLAYFORMER_KERNEL(SlayformerAttentionSoftmaxGrad, firstInputShape, noState, attentionSoftmaxBackward, noDelete)

}  // namespace slayformer
