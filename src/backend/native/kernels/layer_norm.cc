// LayerNorm over the last axis, x̂ = (x − μ)·r, r = 1/√(σ² + ε), y = x̂·g + b, and its gradient, each one pass over the
// rows (src/model/layers.ts, layerNorm). Test: test/backend/fused-ops.test.ts, "LayerNorm".
#include "kernel.h"

namespace slayformer {
namespace {

constexpr char kEps[] = "eps";

// Outputs y and x̂ (shaped as x) and r (x's shape with the last axis 1).
void layerNormForward(void* kernel, TF_OpKernelContext* ctx) {
  const float eps = static_cast<FloatAttr*>(kernel)->value;
  KernelCall call(ctx);
  TF_Status* status = call.status;
  TF_Tensor* x = call.input(0);
  TF_Tensor* gain = call.input(1);
  TF_Tensor* shift = call.input(2);
  TF_Tensor *y = nullptr, *xhat = nullptr, *rstd = nullptr;
  InputShapes shapes("SlayformerLayerNorm", status);
  if (shapes.match({{"x", x, "... D"}, {"gain", gain, "D"}, {"shift", shift, "D"}}) && shapes.atLeast("D", 1) && shapes.finiteNonNegative("eps", eps)) {
    std::vector<int64_t> dims = dimsOf(x);
    y = call.output(0, dims);
    xhat = call.output(1, dims);
    dims.back() = 1;
    rstd = call.output(2, dims);
  }
  if (TF_GetCode(status) == TF_OK) {
    const int64_t d = shapes["D"], rows = TF_TensorElementCount(x) / d;
    const float *xs = data(x), *g = data(gain), *b = data(shift);
    float *ys = data(y), *xh = data(xhat), *rs = data(rstd);
    parallelRows(rows, d, [&](int64_t begin, int64_t end) {
      for (int64_t row = begin; row < end; row++) {
        const float* xr = xs + row * d;
        const float mean = laneSum(d, [&](int64_t j) { return xr[j]; }) / static_cast<float>(d);
        const float var = laneSum(d, [&](int64_t j) { return (xr[j] - mean) * (xr[j] - mean); }) / static_cast<float>(d);
        const float r = 1.0f / std::sqrt(var + eps);
        rs[row] = r;
        for (int64_t j = 0; j < d; j++) {
          const float n = (xr[j] - mean) * r;
          xh[row * d + j] = n;
          ys[row * d + j] = n * g[j] + b[j];
        }
      }
    });
  }
}

// Inputs dy, x̂, r, g → dx = r·(ĝ − mean(ĝ) − x̂·mean(ĝ·x̂)) with ĝ = dy·g; dg = Σ_rows dy·x̂; db = Σ_rows dy.
void layerNormBackward(void*, TF_OpKernelContext* ctx) {
  KernelCall call(ctx);
  TF_Status* status = call.status;
  TF_Tensor* dy = call.input(0);
  TF_Tensor* xhat = call.input(1);
  TF_Tensor* rstd = call.input(2);
  TF_Tensor* gain = call.input(3);
  TF_Tensor *dx = nullptr, *dgain = nullptr, *dshift = nullptr;
  int64_t d = 0;
  InputShapes shapes("SlayformerLayerNormGrad", status);
  if (shapes.match({{"dy", dy, "... D"}, {"xhat", xhat, "... D"}, {"rstd", rstd, "... 1"}, {"gain", gain, "D"}}) && shapes.atLeast("D", 1)) {
    d = shapes["D"];
    dx = call.output(0, dimsOf(xhat));
    dgain = call.output(1, {d});
    dshift = call.output(2, {d});
  }
  if (TF_GetCode(status) == TF_OK) {
    const int64_t rows = TF_TensorElementCount(xhat) / d;
    const float *g = data(dy), *xh = data(xhat), *rs = data(rstd), *gn = data(gain);
    float* out = data(dx);
    parallelRows(rows, d, [&](int64_t begin, int64_t end) {
      for (int64_t row = begin; row < end; row++) {
        const float *gr = g + row * d, *xr = xh + row * d;
        const float meanG = laneSum(d, [&](int64_t j) { return gr[j] * gn[j]; }) / static_cast<float>(d);
        const float meanGX = laneSum(d, [&](int64_t j) { return gr[j] * gn[j] * xr[j]; }) / static_cast<float>(d);
        for (int64_t j = 0; j < d; j++) out[row * d + j] = rs[row] * (gr[j] * gn[j] - meanG - xr[j] * meanGX);
      }
    });
    // Column sums in double: N rows of float32 terms (N up to B·L) would lose the low bits. Split by columns.
    float *dg = data(dgain), *db = data(dshift);
    parallelRows(d, rows, [&](int64_t begin, int64_t end) {
      std::vector<double> sg(end - begin, 0.0), sb(end - begin, 0.0);
      for (int64_t row = 0; row < rows; row++)
        for (int64_t j = begin; j < end; j++) {
          sg[j - begin] += static_cast<double>(g[row * d + j]) * xh[row * d + j];
          sb[j - begin] += g[row * d + j];
        }
      for (int64_t j = begin; j < end; j++) {
        dg[j] = static_cast<float>(sg[j - begin]);
        db[j] = static_cast<float>(sb[j - begin]);
      }
    });
  }
}

// y, x̂: x's shape; r: x's shape with the last axis 1.
void layerNormShapes(TF_ShapeInferenceContext* ctx, TF_Status* status) {
  sameShapeAsInput(ctx, status, 0, 2);
  TF_ShapeHandle *x = TF_NewShapeHandle(), *rows = TF_NewShapeHandle(), *rstd = TF_NewShapeHandle();
  TF_ShapeHandle* one = TF_ShapeInferenceContextVectorFromSize(ctx, 1);
  if (TF_GetCode(status) == TF_OK) TF_ShapeInferenceContextGetInput(ctx, 0, x, status);
  if (TF_GetCode(status) == TF_OK) TF_ShapeInferenceContextSubshape(ctx, x, 0, -1, rows, status);
  if (TF_GetCode(status) == TF_OK) TF_ShapeInferenceContextConcatenateShapes(ctx, rows, one, rstd, status);
  if (TF_GetCode(status) == TF_OK) TF_ShapeInferenceContextSetOutput(ctx, 2, rstd, status);
  for (TF_ShapeHandle* h : {x, rows, rstd, one}) TF_DeleteShapeHandle(h);
}

// dx: x̂'s shape; dg, db: its last axis.
void layerNormGradShapes(TF_ShapeInferenceContext* ctx, TF_Status* status) {
  sameShapeAsInput(ctx, status, 1, 1);
  TF_ShapeHandle *xhat = TF_NewShapeHandle(), *last = TF_NewShapeHandle();
  if (TF_GetCode(status) == TF_OK) TF_ShapeInferenceContextGetInput(ctx, 1, xhat, status);
  if (TF_GetCode(status) == TF_OK) TF_ShapeInferenceContextSubshape(ctx, xhat, -1, 1 << 20, last, status);
  for (int i = 1; i <= 2 && TF_GetCode(status) == TF_OK; i++) TF_ShapeInferenceContextSetOutput(ctx, i, last, status);
  for (TF_ShapeHandle* h : {xhat, last}) TF_DeleteShapeHandle(h);
}

}  // namespace

SLAYFORMER_KERNEL(SlayformerLayerNorm, layerNormShapes, createFloatAttr<kEps>, layerNormForward, deleteFloatAttr)
SLAYFORMER_KERNEL(SlayformerLayerNormGrad, layerNormGradShapes, noState, layerNormBackward, noDelete)

}  // namespace slayformer
