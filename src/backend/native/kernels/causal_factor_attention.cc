// Causal attention of tensor-product features, S = (aq·akᵀ)⊙(bq·bkᵀ) under the mask times [values, 1] (SLAY's causal
// block, src/model/attention/chunked.ts), and its gradient, over query strips as causal_attention.cc.
// Test: test/backend/fused-ops.test.ts, "causal attention of tensor-product features" and "SLAY".
#include "kernel.h"

namespace slayformer {
namespace {

// aq, ak [N, C, Fa], bq, bk [N, C, Fb], values [N, C, D] → out = S·[values, 1] [N, C, D + 1] with S = (aq·akᵀ)⊙(bq·bkᵀ)
// on and below the diagonal (src/model/attention/chunked.ts: the ones column, two products, the masked product of their
// results and a third product in one; the last column, S's row sums, is the linear attention's denominator), and xa = aq·akᵀ, xb = bq·bkᵀ [N, C, C] on and
// below the diagonal (0 above) for the gradient. Strip by strip as SlayformerCausalAttention: the key tiles a strip cannot see are never computed.
void causalFactorAttentionForward(void*, TF_OpKernelContext* ctx) {
  KernelCall call(ctx);
  TF_Status* status = call.status;
  TF_Tensor* in[5] = {};
  for (int i = 0; i < 5; i++) in[i] = call.input(i);
  TF_Tensor* outs[3] = {};  // out, xa, xb
  auto [aq, ak, bq, bk, values] = in;
  InputShapes shapes("SlayformerCausalFactorAttention", status);
  if (shapes.match({{"aq", aq, "N C Fa"}, {"ak", ak, "N C Fa"}, {"bq", bq, "N C Fb"}, {"bk", bk, "N C Fb"}, {"values", values, "N C D"}})) {
    const int64_t n = shapes["N"], c = shapes["C"];
    outs[0] = call.output(0, {n, c, shapes["D"] + 1});
    for (int i = 1; i < 3; i++) outs[i] = call.output(i, {n, c, c});
  }
  if (TF_GetCode(status) == TF_OK) {
    const int64_t n = shapes["N"], c = shapes["C"], fa = shapes["Fa"], fb = shapes["Fb"], dv = shapes["D"], width = dv + 1;
    const float *aqs = data(aq), *aks = data(ak), *bqs = data(bq), *bks = data(bk), *vs = data(values);
    float *os = data(outs[0]), *xas = data(outs[1]), *xbs = data(outs[2]);
    parallelRows(n, c * c * (fa + fb + dv), [&](int64_t begin, int64_t end) {
      float* scores = scratch(static_cast<size_t>(kStrip * c));  // one strip of S
      for (int64_t h = begin; h < end; h++) {
        const float *aqh = aqs + h * c * fa, *akh = aks + h * c * fa, *bqh = bqs + h * c * fb, *bkh = bks + h * c * fb, *vh = vs + h * c * dv;
        float *xah = xas + h * c * c, *xbh = xbs + h * c * c;
        for (int64_t i0 = 0; i0 < c; i0 += kStrip) {
          const int64_t i1 = std::min(c, i0 + kStrip);
          view(xah + i0 * c, i1 - i0, i1, c).noalias() = view(aqh + i0 * fa, i1 - i0, fa, fa) * view(akh, i1, fa, fa).transpose();
          view(xbh + i0 * c, i1 - i0, i1, c).noalias() = view(bqh + i0 * fb, i1 - i0, fb, fb) * view(bkh, i1, fb, fb).transpose();
          float* oh = os + h * c * width;
          for (int64_t i = i0; i < i1; i++) {
            float *xa = xah + i * c, *xb = xbh + i * c, *sr = scores + (i - i0) * c;
            for (int64_t j = 0; j <= i; j++) sr[j] = xa[j] * xb[j];
            for (int64_t j = i + 1; j < i1; j++) sr[j] = 0.0f;
            std::fill(xa + i + 1, xa + c, 0.0f);
            std::fill(xb + i + 1, xb + c, 0.0f);
            oh[i * width + dv] = laneSum(i + 1, [&](int64_t j) { return sr[j]; });
          }
          view(oh + i0 * width, i1 - i0, dv, width).noalias() = view(scores, i1 - i0, i1, c) * view(vh, i1, dv, dv);
        }
      }
    });
  }
}

// dout [N, C, D + 1], aq, ak, bq, bk, values [N, C, D], xa, xb (the forward's) → daq, dak, dbq, dbk, dvalues: dS = dout·[values, 1]ᵀ
// under the mask, dXa = dS⊙xb, dXb = dS⊙xa; the query sides by strips (dXa·ak), the key sides and dvalues by key strips
// over the rows at or below them (dXaᵀ·aq, Sᵀ·dout).
void causalFactorAttentionBackward(void*, TF_OpKernelContext* ctx) {
  KernelCall call(ctx);
  TF_Status* status = call.status;
  TF_Tensor* in[8] = {};
  for (int i = 0; i < 8; i++) in[i] = call.input(i);
  TF_Tensor* grads[5] = {};  // daq, dak, dbq, dbk, dvalues
  auto [dout, aq, ak, bq, bk, values, xa, xb] = in;
  InputShapes shapes("SlayformerCausalFactorAttentionGrad", status);
  if (shapes.match({{"dout", dout, "N C D+1"},
                    {"aq", aq, "N C Fa"},
                    {"ak", ak, "N C Fa"},
                    {"bq", bq, "N C Fb"},
                    {"bk", bk, "N C Fb"},
                    {"values", values, "N C D"},
                    {"xa", xa, "N C C"},
                    {"xb", xb, "N C C"}})) {
    const TF_Tensor* like[5] = {aq, ak, bq, bk, values};
    for (int i = 0; i < 5; i++) grads[i] = call.output(i, dimsOf(like[i]));
  }
  if (TF_GetCode(status) == TF_OK) {
    const int64_t n = shapes["N"], c = shapes["C"], fa = shapes["Fa"], fb = shapes["Fb"], dv = shapes["D"], width = dv + 1;
    const float *gos = data(dout), *aqs = data(aq), *aks = data(ak), *bqs = data(bq), *bks = data(bk), *vs = data(values), *xas = data(xa), *xbs = data(xb);
    float *daqs = data(grads[0]), *daks = data(grads[1]), *dbqs = data(grads[2]), *dbks = data(grads[3]), *dvs = data(grads[4]);
    parallelRows(n, c * c * (2 * fa + 2 * fb + 2 * dv), [&](int64_t begin, int64_t end) {
      // One head's S, dXa, dXb: only the strips' entries are written, and only those are read.
      float *s = scratch(static_cast<size_t>(3 * c * c)), *dxa = s + c * c, *dxb = dxa + c * c;
      for (int64_t h = begin; h < end; h++) {
        const float *go = gos + h * c * width, *aqh = aqs + h * c * fa, *akh = aks + h * c * fa, *bqh = bqs + h * c * fb, *bkh = bks + h * c * fb,
                    *vh = vs + h * c * dv, *xah = xas + h * c * c, *xbh = xbs + h * c * c;
        for (int64_t i0 = 0; i0 < c; i0 += kStrip) {
          const int64_t i1 = std::min(c, i0 + kStrip);
          // dS: the values' columns by a product, the ones column's gradient added to every entry of its row.
          view(dxb + i0 * c, i1 - i0, i1, c).noalias() = view(go + i0 * width, i1 - i0, dv, width) * view(vh, i1, dv, dv).transpose();
          for (int64_t i = i0; i < i1; i++) {
            const float *xar = xah + i * c, *xbr = xbh + i * c, ones = go[i * width + dv];
            float *sr = s + i * c, *dar = dxa + i * c, *dbr = dxb + i * c;
            for (int64_t j = 0; j <= i; j++) {
              const float ds = dbr[j] + ones;
              sr[j] = xar[j] * xbr[j];
              dar[j] = ds * xbr[j];
              dbr[j] = ds * xar[j];
            }
            for (int64_t j = i + 1; j < i1; j++) sr[j] = dar[j] = dbr[j] = 0.0f;
          }
          view(daqs + h * c * fa + i0 * fa, i1 - i0, fa, fa).noalias() = view(dxa + i0 * c, i1 - i0, i1, c) * view(akh, i1, fa, fa);
          view(dbqs + h * c * fb + i0 * fb, i1 - i0, fb, fb).noalias() = view(dxb + i0 * c, i1 - i0, i1, c) * view(bkh, i1, fb, fb);
        }
        for (int64_t j0 = 0; j0 < c; j0 += kStrip) {
          const int64_t j1 = std::min(c, j0 + kStrip), rows = c - j0, cols = j1 - j0;
          view(daks + h * c * fa + j0 * fa, cols, fa, fa).noalias() = view(dxa + j0 * c + j0, rows, cols, c).transpose() * view(aqh + j0 * fa, rows, fa, fa);
          view(dbks + h * c * fb + j0 * fb, cols, fb, fb).noalias() = view(dxb + j0 * c + j0, rows, cols, c).transpose() * view(bqh + j0 * fb, rows, fb, fb);
          view(dvs + h * c * dv + j0 * dv, cols, dv, dv).noalias() = view(s + j0 * c + j0, rows, cols, c).transpose() * view(go + j0 * width, rows, dv, width);
        }
      }
    });
  }
}

// out: [N, C, D + 1] for values [N, C, D]; xa, xb: [N, C, C].
void causalFactorAttentionShapes(TF_ShapeInferenceContext* ctx, TF_Status* status) {
  TF_ShapeHandle *a = TF_NewShapeHandle(), *nc = TF_NewShapeHandle(), *cdim = TF_NewShapeHandle(), *blocks = TF_NewShapeHandle();
  TF_ShapeHandle *values = TF_NewShapeHandle(), *out = TF_NewShapeHandle(), *width = nullptr;
  TF_DimensionHandle* dv = TF_NewDimensionHandle();
  if (TF_GetCode(status) == TF_OK) TF_ShapeInferenceContextGetInput(ctx, 4, values, status);
  if (TF_GetCode(status) == TF_OK && TF_ShapeInferenceContextRankKnown(ctx, values) && TF_ShapeInferenceContextRank(ctx, values) == 3) {
    TF_ShapeInferenceContextDim(ctx, values, 2, dv);
    if (TF_DimensionHandleValueKnown(dv)) width = TF_ShapeInferenceContextVectorFromSize(ctx, static_cast<size_t>(TF_DimensionHandleValue(dv) + 1));
  }
  if (TF_GetCode(status) == TF_OK && !width) TF_ShapeInferenceContextSetUnknownShape(ctx, status);  // every output; xa, xb refined below
  if (TF_GetCode(status) == TF_OK) TF_ShapeInferenceContextGetInput(ctx, 0, a, status);
  if (TF_GetCode(status) == TF_OK) TF_ShapeInferenceContextSubshape(ctx, a, 0, 2, nc, status);
  if (TF_GetCode(status) == TF_OK) TF_ShapeInferenceContextSubshape(ctx, a, 1, 2, cdim, status);
  if (TF_GetCode(status) == TF_OK) TF_ShapeInferenceContextConcatenateShapes(ctx, nc, cdim, blocks, status);
  for (int i = 1; i <= 2 && TF_GetCode(status) == TF_OK; i++) TF_ShapeInferenceContextSetOutput(ctx, i, blocks, status);
  if (TF_GetCode(status) == TF_OK && width) TF_ShapeInferenceContextConcatenateShapes(ctx, nc, width, out, status);
  if (TF_GetCode(status) == TF_OK && width) TF_ShapeInferenceContextSetOutput(ctx, 0, out, status);
  for (TF_ShapeHandle* h : {a, nc, cdim, blocks, values, out}) TF_DeleteShapeHandle(h);
  if (width) TF_DeleteShapeHandle(width);
  TF_DeleteDimensionHandle(dv);
}

// Each gradient has its input's shape (inputs 1–5: aq, ak, bq, bk, values).
void causalFactorAttentionGradShapes(TF_ShapeInferenceContext* ctx, TF_Status* status) {
  TF_ShapeHandle* shape = TF_NewShapeHandle();
  for (int i = 0; i < 5 && TF_GetCode(status) == TF_OK; i++) {
    TF_ShapeInferenceContextGetInput(ctx, i + 1, shape, status);
    if (TF_GetCode(status) == TF_OK) TF_ShapeInferenceContextSetOutput(ctx, i, shape, status);
  }
  TF_DeleteShapeHandle(shape);
}

}  // namespace

SLAYFORMER_KERNEL(SlayformerCausalFactorAttention, causalFactorAttentionShapes, noState, causalFactorAttentionForward, noDelete)
SLAYFORMER_KERNEL(SlayformerCausalFactorAttentionGrad, causalFactorAttentionGradShapes, noState, causalFactorAttentionBackward, noDelete)

}  // namespace slayformer
