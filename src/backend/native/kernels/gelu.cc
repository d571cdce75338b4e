// GELU, y = x·s with s = σ(2c(x + a x³)) (tanh form) or s = Φ(x) (erf form), and its gradient, each one vectorised
// pass where the composed form (src/model/layers.ts, activate) runs 4–9 ops. Test: test/backend/fused-ops.test.ts, "GELU".
#include "kernel.h"

namespace slayformer {
namespace {

constexpr float kGeluC = 0.7978845608028654f;  // √(2/π)
constexpr float kGeluA = 0.044715f;
constexpr float kSqrtHalf = 0.7071067811865476f;
constexpr float kInvSqrt2Pi = 0.3989422804014327f;

inline float erfApprox(float x) {
  const float a = std::fabs(x);
  const float t = 1.0f / (1.0f + 0.3275911f * a);
  const float poly = t * (0.254829592f + t * (-0.284496736f + t * (1.421413741f + t * (-1.453152027f + t * 1.061405429f))));
  return std::copysign(1.0f - poly * expApprox(-a * a), x);
}

inline float geluTanhGate(float x) { return 1.0f / (1.0f + expApprox(-2.0f * kGeluC * x * (1.0f + kGeluA * x * x))); }

// The element loops as plain functions over restrict pointers: what the vectoriser needs to see.
template <bool Erf>
void geluValues(const float* __restrict xs, float* __restrict ys, int64_t n) {
  for (int64_t i = 0; i < n; i++) {
    const float v = xs[i];
    ys[i] = v * (Erf ? 0.5f * (1.0f + erfApprox(v * kSqrtHalf)) : geluTanhGate(v));
  }
}

// dx = dy·y'(x): tanh form s + x·s(1 − s)·2c(1 + 3a x²); erf form Φ(x) + x·φ(x).
template <bool Erf>
void geluGradients(const float* __restrict dy, const float* __restrict xs, float* __restrict dx, int64_t n) {
  for (int64_t i = 0; i < n; i++) {
    const float v = xs[i];
    const float s = Erf ? 0.5f * (1.0f + erfApprox(v * kSqrtHalf)) : geluTanhGate(v);
    const float slope = Erf ? s + v * kInvSqrt2Pi * expApprox(-0.5f * v * v) : s + v * s * (1.0f - s) * 2.0f * kGeluC * (1.0f + 3.0f * kGeluA * v * v);
    dx[i] = dy[i] * slope;
  }
}

constexpr const char* geluName(bool erf, bool grad) {
  return erf ? (grad ? "SlayformerGeluErfGrad" : "SlayformerGeluErf") : (grad ? "SlayformerGeluTanhGrad" : "SlayformerGeluTanh");
}

// x of any shape, scalars included: nothing to check.
template <bool Erf>
void geluForward(void*, TF_OpKernelContext* ctx) {
  KernelCall call(ctx);
  TF_Status* status = call.status;
  TF_Tensor* x = call.input(0);
  TF_Tensor* y = TF_GetCode(status) == TF_OK ? call.output(0, dimsOf(x)) : nullptr;
  if (TF_GetCode(status) == TF_OK) {
    const float* xs = data(x);
    float* ys = data(y);
    parallelRows(TF_TensorElementCount(x), 1, [&](int64_t begin, int64_t end) { geluValues<Erf>(xs + begin, ys + begin, end - begin); });
  }
}

template <bool Erf>
void geluBackward(void*, TF_OpKernelContext* ctx) {
  KernelCall call(ctx);
  TF_Status* status = call.status;
  TF_Tensor* dy = call.input(0);
  TF_Tensor* x = call.input(1);
  InputShapes shapes(geluName(Erf, true), status);
  TF_Tensor* dx = shapes.match({{"dy", dy, "..."}, {"x", x, "..."}}) ? call.output(0, dimsOf(x)) : nullptr;
  if (TF_GetCode(status) == TF_OK) {
    const float* g = data(dy);
    const float* xs = data(x);
    float* out = data(dx);
    parallelRows(TF_TensorElementCount(x), 1, [&](int64_t begin, int64_t end) { geluGradients<Erf>(g + begin, xs + begin, out + begin, end - begin); });
  }
}

}  // namespace

SLAYFORMER_KERNEL(SlayformerGeluTanh, firstInputShape, noState, geluForward<false>, noDelete)
SLAYFORMER_KERNEL(SlayformerGeluTanhGrad, secondInputShape, noState, geluBackward<false>, noDelete)
SLAYFORMER_KERNEL(SlayformerGeluErf, firstInputShape, noState, geluForward<true>, noDelete)
SLAYFORMER_KERNEL(SlayformerGeluErfGrad, secondInputShape, noState, geluBackward<true>, noDelete)

}  // namespace slayformer
