// Causal softmax attention whole, out = softmax(q·kᵀ, causal)·v, and its gradient, the products over query strips on
// Eigen so that the key tiles a strip cannot see are never computed (src/model/attention/softmax.ts).
// Test: test/backend/fused-ops.test.ts, "softmax attention" (the causal cases) and "causal attention".
#include "kernel.h"

namespace slayformer {
namespace {

// The largest of x[0..n), NaN ignored (it reaches the row through e^(x − max) instead); 16 running
// maxima so that the loop vectorises without -ffast-math.
inline float rowMax(const float* __restrict x, int64_t n) {
  float lanes[16];
  for (float& l : lanes) l = -INFINITY;
  int64_t j = 0;
  for (; j + 16 <= n; j += 16)
    for (int k = 0; k < 16; k++) lanes[k] = x[j + k] > lanes[k] ? x[j + k] : lanes[k];
  float m = -INFINITY;
  for (; j < n; j++) m = x[j] > m ? x[j] : m;
  for (float l : lanes) m = l > m ? l : m;
  return m;
}

// Row x[0..n) in place: x[0..seen) becomes its softmax and x[seen..n) zeros, in three passes (the
// exponentials summed as they are written; the scaling and the zeros in one loop).
inline void softmaxPrefix(float* __restrict x, int64_t seen, int64_t n) {
  const float shift = rowMax(x, seen);
  const float total = laneSum(seen, [&](int64_t j) { return x[j] = expApprox(x[j] - shift); });
  const float inv = 1.0f / total;
  for (int64_t j = 0; j < n; j++) x[j] = j < seen ? x[j] * inv : 0.0f;
}

// q (scaled), k, v [N, L, D] → out = P·v and P [N, L, L], P the causal softmax of q·kᵀ (0 above the
// diagonal: the exact zeros that softmax of scores − 1e9 above the diagonal gives in float32): the composed form's three ops (src/model/attention/softmax.ts)
// with the products done strip by strip, skipping the key tiles a strip's queries cannot see.
void causalAttentionForward(void*, TF_OpKernelContext* ctx) {
  KernelCall call(ctx);
  TF_Status* status = call.status;
  TF_Tensor* q = call.input(0);
  TF_Tensor* k = call.input(1);
  TF_Tensor* v = call.input(2);
  TF_Tensor *out = nullptr, *probs = nullptr;
  InputShapes shapes("SlayformerCausalAttention", status);
  if (shapes.match({{"q", q, "N L D"}, {"k", k, "N L D"}, {"v", v, "N L D"}})) {
    out = call.output(0, dimsOf(q));
    probs = call.output(1, {shapes["N"], shapes["L"], shapes["L"]});
  }
  if (TF_GetCode(status) == TF_OK) {
    const int64_t n = shapes["N"], l = shapes["L"], d = shapes["D"];
    const float *qs = data(q), *ks = data(k), *vs = data(v);
    float *os = data(out), *ps = data(probs);
    parallelRows(n, l * l * d, [&](int64_t begin, int64_t end) {
      for (int64_t h = begin; h < end; h++) {
        const float *qh = qs + h * l * d, *kh = ks + h * l * d, *vh = vs + h * l * d;
        float *oh = os + h * l * d, *ph = ps + h * l * l;
        for (int64_t i0 = 0; i0 < l; i0 += kStrip) {
          const int64_t i1 = std::min(l, i0 + kStrip);
          view(ph + i0 * l, i1 - i0, i1, l).noalias() = view(qh + i0 * d, i1 - i0, d, d) * view(kh, i1, d, d).transpose();
          for (int64_t i = i0; i < i1; i++) softmaxPrefix(ph + i * l, i + 1, l);
          view(oh + i0 * d, i1 - i0, d, d).noalias() = view(ph + i0 * l, i1 - i0, i1, l) * view(vh, i1, d, d);
        }
      }
    });
  }
}

// dout, q, k, v, out [N, L, D], P [N, L, L] → dq, dk, dv: dS = P⊙(dout·vᵀ − rowsum(dout⊙out)) on the
// strips, dq = dS·k by query strips, dk = dSᵀ·q and dv = Pᵀ·dout by key strips (the rows at or below them).
void causalAttentionBackward(void*, TF_OpKernelContext* ctx) {
  KernelCall call(ctx);
  TF_Status* status = call.status;
  TF_Tensor* in[6] = {};
  for (int i = 0; i < 6; i++) in[i] = call.input(i);
  TF_Tensor* grads[3] = {};  // dq, dk, dv
  auto [dout, q, k, v, probs, out] = in;
  InputShapes shapes("SlayformerCausalAttentionGrad", status);
  if (shapes.match({{"dout", dout, "N L D"}, {"q", q, "N L D"}, {"k", k, "N L D"}, {"v", v, "N L D"}, {"probs", probs, "N L L"}, {"out", out, "N L D"}}))
    for (int i = 0; i < 3; i++) grads[i] = call.output(i, dimsOf(q));
  if (TF_GetCode(status) == TF_OK) {
    const int64_t n = shapes["N"], l = shapes["L"], d = shapes["D"];
    const float *gos = data(dout), *qs = data(q), *ks = data(k), *vs = data(v), *ps = data(probs), *os = data(out);
    float *dqs = data(grads[0]), *dks = data(grads[1]), *dvs = data(grads[2]);
    parallelRows(n, l * l * d, [&](int64_t begin, int64_t end) {
      // dS of one head: only the strips' entries are written, and only those are read.
      float* ds = scratch(static_cast<size_t>(l * l));
      for (int64_t h = begin; h < end; h++) {
        const int64_t at = h * l * d;
        const float *go = gos + at, *qh = qs + at, *kh = ks + at, *vh = vs + at, *oh = os + at, *ph = ps + h * l * l;
        for (int64_t i0 = 0; i0 < l; i0 += kStrip) {
          const int64_t i1 = std::min(l, i0 + kStrip);
          view(ds + i0 * l, i1 - i0, i1, l).noalias() = view(go + i0 * d, i1 - i0, d, d) * view(vh, i1, d, d).transpose();
          for (int64_t i = i0; i < i1; i++) {
            const float term = laneSum(d, [&](int64_t c) { return go[i * d + c] * oh[i * d + c]; });
            const float* pr = ph + i * l;
            float* dsr = ds + i * l;
            for (int64_t j = 0; j < i1; j++) dsr[j] = pr[j] * (dsr[j] - term);
          }
          view(dqs + at + i0 * d, i1 - i0, d, d).noalias() = view(ds + i0 * l, i1 - i0, i1, l) * view(kh, i1, d, d);
        }
        for (int64_t j0 = 0; j0 < l; j0 += kStrip) {
          const int64_t j1 = std::min(l, j0 + kStrip);
          view(dks + at + j0 * d, j1 - j0, d, d).noalias() = view(ds + j0 * l + j0, l - j0, j1 - j0, l).transpose() * view(qh + j0 * d, l - j0, d, d);
          view(dvs + at + j0 * d, j1 - j0, d, d).noalias() = view(ph + j0 * l + j0, l - j0, j1 - j0, l).transpose() * view(go + j0 * d, l - j0, d, d);
        }
      }
    });
  }
}

// out: q's shape; probs: [N, L, L].
void causalAttentionShapes(TF_ShapeInferenceContext* ctx, TF_Status* status) {
  sameShapeAsInput(ctx, status, 0, 1);
  TF_ShapeHandle *q = TF_NewShapeHandle(), *nl = TF_NewShapeHandle(), *l = TF_NewShapeHandle(), *probs = TF_NewShapeHandle();
  if (TF_GetCode(status) == TF_OK) TF_ShapeInferenceContextGetInput(ctx, 0, q, status);
  if (TF_GetCode(status) == TF_OK) TF_ShapeInferenceContextSubshape(ctx, q, 0, 2, nl, status);
  if (TF_GetCode(status) == TF_OK) TF_ShapeInferenceContextSubshape(ctx, q, 1, 2, l, status);
  if (TF_GetCode(status) == TF_OK) TF_ShapeInferenceContextConcatenateShapes(ctx, nl, l, probs, status);
  if (TF_GetCode(status) == TF_OK) TF_ShapeInferenceContextSetOutput(ctx, 1, probs, status);
  for (TF_ShapeHandle* h : {q, nl, l, probs}) TF_DeleteShapeHandle(h);
}

// dq, dk, dv: q's shape.
void causalAttentionGradShapes(TF_ShapeInferenceContext* ctx, TF_Status* status) { sameShapeAsInput(ctx, status, 1, 3); }

}  // namespace

SLAYFORMER_KERNEL(SlayformerCausalAttention, causalAttentionShapes, noState, causalAttentionForward, noDelete)
SLAYFORMER_KERNEL(SlayformerCausalAttentionGrad, causalAttentionGradShapes, noState, causalAttentionBackward, noDelete)

}  // namespace slayformer
