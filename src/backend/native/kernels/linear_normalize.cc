// Linear attention's normalisation, the sums [.., D + 1] (numerators, then the denominator) → their ratio, and its
// gradient (src/model/attention/chunked.ts, normalize). Test: test/backend/fused-ops.test.ts, "linear attention's normalisation".
#include "kernel.h"

namespace slayformer {
namespace {

constexpr char kDelta[] = "delta";

// raw [.., D + 1] → out [.., D] = raw[.., :D]/(raw[.., D] + δ) (src/model/attention/chunked.ts, normalize: two slices,
// an addition and a division in one pass).
void linearNormalizeForward(void* kernel, TF_OpKernelContext* ctx) {
  const float delta = static_cast<FloatAttr*>(kernel)->value;
  KernelCall call(ctx);
  TF_Status* status = call.status;
  TF_Tensor* raw = call.input(0);
  TF_Tensor* out = nullptr;
  InputShapes shapes("SlayformerLinearNormalize", status);
  if (shapes.match({{"raw", raw, "... D+1"}}) && shapes.atLeast("D", 1) && shapes.finiteNonNegative("delta", delta)) {
    std::vector<int64_t> dims = dimsOf(raw);
    dims.back() = shapes["D"];
    out = call.output(0, dims);
  }
  if (TF_GetCode(status) == TF_OK) {
    const int64_t d = shapes["D"], width = d + 1, rows = TF_TensorElementCount(raw) / width;
    const float* r = data(raw);
    float* o = data(out);
    parallelRows(rows, width, [&](int64_t begin, int64_t end) {
      for (int64_t row = begin; row < end; row++) {
        const float* rr = r + row * width;
        const float den = rr[d] + delta;
        for (int64_t j = 0; j < d; j++) o[row * d + j] = rr[j] / den;
      }
    });
  }
}

// dy [.., D], raw [.., D + 1] → draw: dy/g for the numerators and −Σ_j dy_j·(raw_j/g)/g for the denominator, g = raw[.., D] + δ:
// the gradient of src/model/ops.ts's safeDivide (never g², which underflows for a δ-sized denominator).
void linearNormalizeBackward(void* kernel, TF_OpKernelContext* ctx) {
  const float delta = static_cast<FloatAttr*>(kernel)->value;
  KernelCall call(ctx);
  TF_Status* status = call.status;
  TF_Tensor* dy = call.input(0);
  TF_Tensor* raw = call.input(1);
  TF_Tensor* draw = nullptr;
  InputShapes shapes("SlayformerLinearNormalizeGrad", status);
  if (shapes.match({{"dy", dy, "... D"}, {"raw", raw, "... D+1"}}) && shapes.atLeast("D", 1) && shapes.finiteNonNegative("delta", delta))
    draw = call.output(0, dimsOf(raw));
  if (TF_GetCode(status) == TF_OK) {
    const int64_t d = shapes["D"], width = d + 1, rows = TF_TensorElementCount(raw) / width;
    const float *g = data(dy), *r = data(raw);
    float* dr = data(draw);
    parallelRows(rows, width, [&](int64_t begin, int64_t end) {
      for (int64_t row = begin; row < end; row++) {
        const float *gr = g + row * d, *rr = r + row * width;
        float* drr = dr + row * width;
        const float den = rr[d] + delta;
        for (int64_t j = 0; j < d; j++) drr[j] = gr[j] / den;
        drr[d] = -laneSum(d, [&](int64_t j) { return gr[j] * (rr[j] / den); }) / den;
      }
    });
  }
}

// out: raw's shape with the last axis one shorter.
void linearNormalizeShapes(TF_ShapeInferenceContext* ctx, TF_Status* status) {
  TF_ShapeHandle *raw = TF_NewShapeHandle(), *rows = TF_NewShapeHandle(), *out = TF_NewShapeHandle(), *width = nullptr;
  TF_DimensionHandle* w = TF_NewDimensionHandle();
  TF_ShapeInferenceContextGetInput(ctx, 0, raw, status);
  const bool known = TF_GetCode(status) == TF_OK && TF_ShapeInferenceContextRankKnown(ctx, raw) && TF_ShapeInferenceContextRank(ctx, raw) >= 1;
  if (known) {
    const int64_t rank = TF_ShapeInferenceContextRank(ctx, raw);
    TF_ShapeInferenceContextDim(ctx, raw, rank - 1, w);
    if (TF_DimensionHandleValueKnown(w) && TF_DimensionHandleValue(w) >= 2) {
      width = TF_ShapeInferenceContextVectorFromSize(ctx, static_cast<size_t>(TF_DimensionHandleValue(w) - 1));
      TF_ShapeInferenceContextSubshape(ctx, raw, 0, rank - 1, rows, status);
      if (TF_GetCode(status) == TF_OK) TF_ShapeInferenceContextConcatenateShapes(ctx, rows, width, out, status);
      if (TF_GetCode(status) == TF_OK) TF_ShapeInferenceContextSetOutput(ctx, 0, out, status);
    }
  }
  if (TF_GetCode(status) == TF_OK && !width) TF_ShapeInferenceContextSetUnknownShape(ctx, status);
  for (TF_ShapeHandle* h : {raw, rows, out}) TF_DeleteShapeHandle(h);
  if (width) TF_DeleteShapeHandle(width);
  TF_DeleteDimensionHandle(w);
}

}  // namespace

SLAYFORMER_KERNEL(SlayformerLinearNormalize, linearNormalizeShapes, createFloatAttr<kDelta>, linearNormalizeForward, deleteFloatAttr)
SLAYFORMER_KERNEL(SlayformerLinearNormalizeGrad, secondInputShape, createFloatAttr<kDelta>, linearNormalizeBackward, deleteFloatAttr)

}  // namespace slayformer
