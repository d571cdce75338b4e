// SLAY's feature factors, anchor features and positive random features of unit rows (src/model/attention/slay.ts,
// 'anchor' polynomial), and their gradient. Test: test/backend/fused-ops.test.ts, "SLAY's feature factors".
#include "kernel.h"

namespace slayformer {
namespace {

// The sizes of SlayformerSlayFactors(Grad)'s inputs: x [B, H, L, d], anchors [d, P], omegas [R, H, d, M], nodes [R, 2].
struct SlayShapes {
  int64_t b, h, l, d, p, r, m;
};

// Whether the inputs both directions share have those shapes; their sizes into `out`.
bool slayShapes(InputShapes& shapes, const TF_Tensor* x, const TF_Tensor* anchors, const TF_Tensor* omegas, const TF_Tensor* nodes, SlayShapes* out) {
  if (!shapes.match({{"x", x, "B H L d"}, {"anchors", anchors, "d P"}, {"omegas", omegas, "R H d M"}, {"nodes", nodes, "R 2"}})) return false;
  *out = {shapes["B"], shapes["H"], shapes["L"], shapes["d"], shapes["P"], shapes["R"], shapes["M"]};
  return true;
}

// What both directions compute for the L rows of one (batch, head): u = x/‖x‖ (as l2Normalize: ‖x‖² floored at
// 1e-24), c = u·anchors, and e [L, R·M] in b's layout, the exponents k_r·(u·ω_r) − k_r²‖u‖²/2 before the clamp.
struct SlayRows {
  RowMajor u, c, e;
  std::vector<float> invNorm;

  void compute(const float* x, const float* anchors, const float* omegas, const float* nodes, const SlayShapes& sh, int64_t head) {
    const int64_t d = sh.d, rm = sh.r * sh.m;
    u.resize(sh.l, d);
    e.resize(sh.l, rm);
    invNorm.resize(sh.l);
    for (int64_t i = 0; i < sh.l; i++) {
      const float* xr = x + i * d;
      const float sum = laneSum(d, [&](int64_t j) { return xr[j] * xr[j]; });
      invNorm[i] = 1.0f / std::sqrt(std::max(sum, 1e-24f));
      float* ur = u.data() + i * d;
      for (int64_t j = 0; j < d; j++) ur[j] = xr[j] * invNorm[i];
    }
    c.noalias() = u * view(anchors, d, sh.p, sh.p);
    for (int64_t r = 0; r < sh.r; r++) view(e.data() + r * sh.m, sh.l, sh.m, rm).noalias() = u * view(omegas + (r * sh.h + head) * d * sh.m, d, sh.m, sh.m);
    for (int64_t i = 0; i < sh.l; i++) {
      const float* ur = u.data() + i * d;
      const float unitSum = laneSum(d, [&](int64_t j) { return ur[j] * ur[j]; });
      for (int64_t r = 0; r < sh.r; r++) {
        const float k = nodes[r * 2], half = 0.5f * k * k * unitSum;
        float* er = e.data() + i * rm + r * sh.m;
        for (int64_t j = 0; j < sh.m; j++) er[j] = k * er[j] - half;
      }
    }
  }
};

inline float clampExponent(float e) { return e < -20.0f ? -20.0f : e > 20.0f ? 20.0f : e; }

// x, anchors, omegas, nodes (k_r = √(2 s_r), √w_r) → a = c²/√P [B, H, L, P] and b = concat_r √w_r·M^(−1/2)·exp(clamp(e_r, ±20))
// [B, H, L, R·M]: SLAY's two factors (src/model/attention/slay.ts, 'anchor' polynomial) in one op.
void slayFactorsForward(void*, TF_OpKernelContext* ctx) {
  KernelCall call(ctx);
  TF_Status* status = call.status;
  TF_Tensor* in[4] = {};
  for (int i = 0; i < 4; i++) in[i] = call.input(i);
  TF_Tensor* outs[2] = {};
  auto [x, anchors, omegas, nodes] = in;
  SlayShapes sh{};
  InputShapes shapes("SlayformerSlayFactors", status);
  if (slayShapes(shapes, x, anchors, omegas, nodes, &sh)) {
    outs[0] = call.output(0, {sh.b, sh.h, sh.l, sh.p});
    outs[1] = call.output(1, {sh.b, sh.h, sh.l, sh.r * sh.m});
  }
  if (TF_GetCode(status) == TF_OK) {
    const float *xs = data(x), *as = data(anchors), *os = data(omegas), *ns = data(nodes);
    float *aOut = data(outs[0]), *bOut = data(outs[1]);
    const float invSqrtP = 1.0f / std::sqrt(static_cast<float>(sh.p)), invSqrtM = 1.0f / std::sqrt(static_cast<float>(sh.m));
    const int64_t rm = sh.r * sh.m;
    parallelRows(sh.b * sh.h, sh.l * sh.d * (sh.p + rm), [&](int64_t begin, int64_t end) {
      SlayRows rows;
      for (int64_t bh = begin; bh < end; bh++) {
        rows.compute(xs + bh * sh.l * sh.d, as, os, ns, sh, bh % sh.h);
        float *a = aOut + bh * sh.l * sh.p, *b = bOut + bh * sh.l * rm;
        const float* c = rows.c.data();
        for (int64_t j = 0; j < sh.l * sh.p; j++) a[j] = c[j] * c[j] * invSqrtP;
        for (int64_t i = 0; i < sh.l; i++)
          for (int64_t r = 0; r < sh.r; r++) {
            const float scale = invSqrtM * ns[r * 2 + 1];
            const float* er = rows.e.data() + i * rm + r * sh.m;
            float* br = b + i * rm + r * sh.m;
            for (int64_t j = 0; j < sh.m; j++) br[j] = expApprox(clampExponent(er[j])) * scale;
          }
      }
    });
  }
}

// da, db, x, anchors, omegas, nodes → dx: through a = c²/√P, b_r = √w_r M^(−½) e^(e_r) (zero where clamped),
// e_r = k_r u·ω_r − k_r²‖u‖²/2 and u = x/‖x‖, recomputing the forward's rows.
void slayFactorsBackward(void*, TF_OpKernelContext* ctx) {
  KernelCall call(ctx);
  TF_Status* status = call.status;
  TF_Tensor* in[6] = {};
  for (int i = 0; i < 6; i++) in[i] = call.input(i);
  TF_Tensor* dx = nullptr;
  auto [da, db, x, anchors, omegas, nodes] = in;
  SlayShapes sh{};
  InputShapes shapes("SlayformerSlayFactorsGrad", status);
  if (slayShapes(shapes, x, anchors, omegas, nodes, &sh) && shapes.match({{"da", da, "B H L P"}, {"db", db, "B H L R*M"}})) dx = call.output(0, dimsOf(x));
  if (TF_GetCode(status) == TF_OK) {
    const float *das = data(da), *dbs = data(db), *xs = data(x), *as = data(anchors), *os = data(omegas), *ns = data(nodes);
    float* dxs = data(dx);
    const float invSqrtP = 1.0f / std::sqrt(static_cast<float>(sh.p)), invSqrtM = 1.0f / std::sqrt(static_cast<float>(sh.m));
    const int64_t d = sh.d, rm = sh.r * sh.m;
    parallelRows(sh.b * sh.h, sh.l * d * (sh.p + rm), [&](int64_t begin, int64_t end) {
      SlayRows rows;
      RowMajor gradC(sh.l, sh.p), gradE(sh.l, rm), du(sh.l, d);
      for (int64_t bh = begin; bh < end; bh++) {
        rows.compute(xs + bh * sh.l * d, as, os, ns, sh, bh % sh.h);
        const float *dA = das + bh * sh.l * sh.p, *dB = dbs + bh * sh.l * rm, *c = rows.c.data();
        for (int64_t j = 0; j < sh.l * sh.p; j++) gradC.data()[j] = dA[j] * 2.0f * c[j] * invSqrtP;
        du.noalias() = gradC * view(as, d, sh.p, sh.p).transpose();
        // gradE = k_r·∂/∂e_r; the −k_r²‖u‖²/2 term's gradient, −k_r² u·Σ_j ∂/∂e_rj, lies along u and the
        // normalisation's Jacobian (I − uuᵀ)/‖x‖ removes it, except below the floor (then it is added below).
        for (int64_t i = 0; i < sh.l; i++)
          for (int64_t r = 0; r < sh.r; r++) {
            const float k = ns[r * 2], scale = invSqrtM * ns[r * 2 + 1];
            const float *er = rows.e.data() + i * rm + r * sh.m, *dbr = dB + i * rm + r * sh.m;
            float* gr = gradE.data() + i * rm + r * sh.m;
            // Branch-free (exp of the clamped exponent, times 0 where clamped) so that the loop vectorises.
            for (int64_t j = 0; j < sh.m; j++) {
              const float inside = er[j] >= -20.0f && er[j] <= 20.0f ? 1.0f : 0.0f;
              gr[j] = k * dbr[j] * expApprox(clampExponent(er[j])) * scale * inside;
            }
          }
        for (int64_t r = 0; r < sh.r; r++)
          du.noalias() += view(gradE.data() + r * sh.m, sh.l, sh.m, rm) * view(os + (r * sh.h + bh % sh.h) * d * sh.m, d, sh.m, sh.m).transpose();
        float* dX = dxs + bh * sh.l * d;
        const float* xb = xs + bh * sh.l * d;
        for (int64_t i = 0; i < sh.l; i++) {
          const float *ur = rows.u.data() + i * d, *dur = du.data() + i * d, *xr = xb + i * d;
          const float along = laneSum(d, [&](int64_t j) { return ur[j] * dur[j]; }), norm2 = laneSum(d, [&](int64_t j) { return xr[j] * xr[j]; });
          float* dxr = dX + i * d;
          if (norm2 > 1e-24f) {
            for (int64_t j = 0; j < d; j++) dxr[j] = rows.invNorm[i] * (dur[j] - ur[j] * along);
          } else {
            float pull = 0;  // Σ_r k_r² Σ_j ∂/∂e_rj, from gradE = k_r·∂/∂e_rj
            for (int64_t r = 0; r < sh.r; r++)
              for (int64_t j = 0; j < sh.m; j++) pull += ns[r * 2] * gradE(i, r * sh.m + j);
            for (int64_t j = 0; j < d; j++) dxr[j] = rows.invNorm[i] * (dur[j] - pull * ur[j]);
          }
        }
      }
    });
  }
}

// a [B, H, L, P] from x and anchors, b [B, H, L, R·M] from x, omegas and nodes.
void slayFactorShapes(TF_ShapeInferenceContext* ctx, TF_Status* status) {
  TF_ShapeHandle *x = TF_NewShapeHandle(), *lead = TF_NewShapeHandle(), *anchors = TF_NewShapeHandle(), *p = TF_NewShapeHandle(), *a = TF_NewShapeHandle();
  TF_ShapeHandle* b = TF_NewShapeHandle();
  TF_ShapeInferenceContextGetInput(ctx, 0, x, status);
  if (TF_GetCode(status) == TF_OK) TF_ShapeInferenceContextSubshape(ctx, x, 0, 3, lead, status);
  if (TF_GetCode(status) == TF_OK) TF_ShapeInferenceContextGetInput(ctx, 1, anchors, status);
  if (TF_GetCode(status) == TF_OK) TF_ShapeInferenceContextSubshape(ctx, anchors, 1, 2, p, status);
  if (TF_GetCode(status) == TF_OK) TF_ShapeInferenceContextConcatenateShapes(ctx, lead, p, a, status);
  if (TF_GetCode(status) == TF_OK) TF_ShapeInferenceContextSetOutput(ctx, 0, a, status);
  // R·M is known only from two inputs' sizes: the last axis of b is left unknown to shape inference.
  TF_ShapeHandle* unknown = TF_ShapeInferenceContextVectorFromSize(ctx, -1);
  if (TF_GetCode(status) == TF_OK) TF_ShapeInferenceContextConcatenateShapes(ctx, lead, unknown, b, status);
  if (TF_GetCode(status) == TF_OK) TF_ShapeInferenceContextSetOutput(ctx, 1, b, status);
  for (TF_ShapeHandle* h : {x, lead, anchors, p, a, b, unknown}) TF_DeleteShapeHandle(h);
}

// dx: x's shape (input 2).
void slayFactorGradShapes(TF_ShapeInferenceContext* ctx, TF_Status* status) { sameShapeAsInput(ctx, status, 2, 1); }

}  // namespace

SLAYFORMER_KERNEL(SlayformerSlayFactors, slayFactorShapes, noState, slayFactorsForward, noDelete)
SLAYFORMER_KERNEL(SlayformerSlayFactorsGrad, slayFactorGradShapes, noState, slayFactorsBackward, noDelete)

}  // namespace slayformer
