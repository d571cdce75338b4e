// Fused CPU kernels for the training step (issue 35; docs/benchmarks.md, "Fewer ops and fused kernels"):
// GELU (tanh and erf forms), LayerNorm, linear attention's normalisation and attention's softmax backward, each one
// pass over memory where the composed form runs 4–9 TensorFlow ops; causal softmax attention, SLAY's causal block of
// tensor-product features and SLAY's feature factors, each whole, their products over query strips
// on Eigen (the wheel's headers) so that key tiles a strip cannot see are never computed; forward and
// backward each. TensorFlow's own graph optimiser cannot fuse
// these in a training graph (the backward reads the intermediates), and torch.compile's inductor
// does exactly this kind of fusion; so the kernels are written here, against TensorFlow's stable C
// API for ops and kernels (tensorflow/c/ops.h, kernels.h: plain C, the wheel's own library), built by
// `npm run setup:tensorflow` with node-gyp and loaded as a Node addon after the binding: loading
// registers the ops and their CPU kernels in the process's TensorFlow, so that eager calls and
// recorded functions can name them (src/backend/tensorflow.ts registers the tfjs kernels that do).
// The maths is the composed form's (src/model/layers.ts); test/backend/fused-ops.test.ts holds the
// two to float rounding.
#ifndef SLAYFORMER_STANDALONE_OPS
#include <node_api.h>
#endif

#include <algorithm>
#include <atomic>
#include <cctype>
#include <functional>
#include <memory>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

// The wheel's Eigen (3.4.90) does not compile its half-precision packets under GCC 12 on CPUs with
// AVX512-FP16; these kernels use float alone, so Eigen is told the CPU lacks it.
#undef __AVX512FP16__
// One Eigen product per call on the calling thread: the kernels split their work over threads themselves.
#define EIGEN_DONT_PARALLELIZE
#include <Eigen/Core>

#include "tensorflow/c/kernels.h"
#include "tensorflow/c/ops.h"
#include "tensorflow/c/tf_status.h"
#include "tensorflow/c/tf_tensor.h"

namespace {

constexpr float kGeluC = 0.7978845608028654f;  // √(2/π)
constexpr float kGeluA = 0.044715f;
constexpr float kSqrtHalf = 0.7071067811865476f;
constexpr float kInvSqrt2Pi = 0.3989422804014327f;

// One parallelRows call's rows, handed out in blocks to whichever thread asks next; on the heap, shared with helpers
// that may outlive the call.
struct RowBlocks {
  std::atomic<int64_t> next{0}, done{0};
  int64_t rows = 0, block = 1;
  std::function<void(int64_t, int64_t)> body;

  // Claims and runs blocks until none is left.
  void drain() {
    for (int64_t begin; (begin = next.fetch_add(block)) < rows;) {
      const int64_t end = std::min(rows, begin + block);
      body(begin, end);
      done.fetch_add(end - begin, std::memory_order_release);
    }
  }
};

// Scratch floats of the calling thread, kept between blocks and calls (parallelRows runs a body once per block of
// rows). Not zeroed: the kernels write what they read.
float* scratch(size_t n) {
  thread_local std::vector<float> buffer;
  if (buffer.size() < n) buffer.resize(n);
  return buffer.data();
}

// Rows [begin, end) of `rows` processed by `body`, on up to four threads when the work is large enough to pay for
// starting one (TensorFlow's own thread pool is not reachable through the C API). The rows go out in small blocks
// from a shared counter, and the caller waits only for blocks a helper has claimed, not for the helper to start: on a
// busy host a helper may get a core late or not before the caller is done, and a fixed half of the rows would then
// hold the whole op (and the step behind it) until it ran. A helper that starts late finds nothing left and exits
// without touching `body`.
template <typename Body>
void parallelRows(int64_t rows, int64_t rowSize, Body body) {
  const int64_t work = rows * rowSize;
  const unsigned cores = std::thread::hardware_concurrency();
  if (work < (1 << 17) || rows < 2 || cores < 2) {
    body(0, rows);
    return;
  }
  const int64_t threads = std::min<int64_t>(std::min<int64_t>(cores, 4), rows);
  auto blocks = std::make_shared<RowBlocks>();
  blocks->rows = rows;
  blocks->block = std::max<int64_t>(1, rows / (threads * 8));
  blocks->body = [&body](int64_t begin, int64_t end) { body(begin, end); };
  for (int64_t t = 1; t < threads; t++) std::thread([blocks] { blocks->drain(); }).detach();
  blocks->drain();
  while (blocks->done.load(std::memory_order_acquire) < rows) std::this_thread::yield();
}

// Σ_j term(j) for j in [0, n) over 16 running sums: a single running sum is a chain of dependent additions the
// compiler may not reorder without -ffast-math, so the loop would not vectorise (the terms are the same, their
// order of addition is not).
template <typename Term>
inline float laneSum(int64_t n, Term term) {
  float lanes[16] = {};
  int64_t j = 0;
  for (; j + 16 <= n; j += 16)
    for (int k = 0; k < 16; k++) lanes[k] += term(j + k);
  float total = 0;
  for (; j < n; j++) total += term(j);
  for (float lane : lanes) total += lane;
  return total;
}

std::vector<int64_t> dimsOf(const TF_Tensor* t) {
  std::vector<int64_t> dims(TF_NumDims(t));
  for (size_t i = 0; i < dims.size(); i++) dims[i] = TF_Dim(t, static_cast<int>(i));
  return dims;
}

// One kernel call's status and the tensors it takes and allocates, released when the call ends; a status holding
// an error by then is reported to TensorFlow as the call's failure. input and output return null once an error is set.
struct KernelCall {
  TF_OpKernelContext* ctx;
  TF_Status* status = TF_NewStatus();
  std::vector<TF_Tensor*> held;

  explicit KernelCall(TF_OpKernelContext* context) : ctx(context) {}
  KernelCall(const KernelCall&) = delete;
  KernelCall& operator=(const KernelCall&) = delete;
  ~KernelCall() {
    if (!ok()) TF_OpKernelContext_Failure(ctx, status);
    for (TF_Tensor* t : held) TF_DeleteTensor(t);
    TF_DeleteStatus(status);
  }

  bool ok() const { return TF_GetCode(status) == TF_OK; }

  TF_Tensor* input(int i) {
    TF_Tensor* t = nullptr;
    if (ok()) TF_GetInput(ctx, i, &t, status);
    return keep(t);
  }

  TF_Tensor* output(int i, const std::vector<int64_t>& dims) {
    if (!ok()) return nullptr;
    int64_t n = 1;
    for (int64_t d : dims) n *= d;
    return keep(TF_AllocateOutput(ctx, i, TF_FLOAT, dims.data(), static_cast<int>(dims.size()), n * sizeof(float), status));
  }

 private:
  TF_Tensor* keep(TF_Tensor* t) {
    if (t) held.push_back(t);
    return t;
  }
};

float* data(TF_Tensor* t) { return static_cast<float*>(TF_TensorData(t)); }

// A kernel's inputs held to the shapes it is written for, before it allocates or reads anything: a registered kernel
// runs for any graph that names it, with whatever that graph feeds it (docs/bounds.md, "Native kernels"). A shape is
// written as terms separated by spaces: a name stands for a size, bound where it first appears (inputs are checked in
// the order given) and equal wherever it appears again; "D+1" is one more than D (and binds D where D is new); "R*M" is
// the product of two bound names; a number is that size; a leading "..." is any number of leading axes, the same ones
// in every input that starts with it. The first mismatch sets an error naming the kernel, the input, its shape and the
// expected one, and every later check answers false. O(rank) per call.
class InputShapes {
 public:
  struct Input {
    const char* name;
    const TF_Tensor* tensor;
    const char* shape;
  };

  InputShapes(const char* op, TF_Status* status) : op_(op), status_(status) {}

  bool ok() const { return TF_GetCode(status_) == TF_OK; }

  // Whether every input has its shape.
  bool match(std::initializer_list<Input> inputs) {
    for (const Input& in : inputs)
      if (!ok() || !matchInput(in)) return false;
    return ok();
  }

  // The size match bound to `name`.
  int64_t operator[](std::string_view name) const { return find(name)->size; }

  // Whether the size bound to `name` is at least `min`: an axis the kernel divides by, or reads an element of.
  bool atLeast(std::string_view name, int64_t min) {
    const Binding* b = find(name);
    if (ok() && b->size < min) fail(b->from, std::string(name) + " ≥ " + std::to_string(min));
    return ok();
  }

  // Whether a float attribute is finite and not negative (LayerNorm's ε, the normalisation's δ).
  bool finiteNonNegative(const char* attr, float value) {
    if (ok() && !(std::isfinite(value) && value >= 0.0f)) {
      char text[32];
      std::snprintf(text, sizeof text, "%g", value);
      setError(std::string(attr) + " is " + text + " where a finite value ≥ 0 is expected");
    }
    return ok();
  }

 private:
  struct Binding {
    std::string_view name;
    int64_t size;
    Input from;
  };

  const char* op_;
  TF_Status* status_;
  std::vector<Binding> bound_;
  // The axes "..." stands for, once an input has bound them.
  std::vector<int64_t> leading_;
  const char* leadingFrom_ = nullptr;

  const Binding* find(std::string_view name) const {
    for (const Binding& b : bound_)
      if (b.name == name) return &b;
    return nullptr;
  }

  static std::vector<std::string_view> termsOf(const char* shape) {
    std::vector<std::string_view> terms;
    for (std::string_view rest(shape); !rest.empty();) {
      const size_t space = rest.find(' ');
      terms.push_back(rest.substr(0, space));
      rest = space == std::string_view::npos ? std::string_view() : rest.substr(space + 1);
    }
    return terms;
  }

  static bool isNumber(std::string_view term) { return std::isdigit(static_cast<unsigned char>(term.front())) != 0; }

  // The names a term uses: D in "D" and "D+1", R and M in "R*M"; none in a number or "...".
  static std::vector<std::string_view> namesIn(std::string_view term) {
    if (term == "..." || isNumber(term)) return {};
    const size_t split = term.find_first_of("+*");
    if (split != std::string_view::npos && term[split] == '*') return {term.substr(0, split), term.substr(split + 1)};
    return {term.substr(0, split)};
  }

  bool matchInput(const Input& in) {
    std::vector<std::string_view> terms = termsOf(in.shape);
    const bool ellipsis = !terms.empty() && terms.front() == "...";
    if (ellipsis) terms.erase(terms.begin());
    const std::vector<int64_t> dims = dimsOf(in.tensor);
    const int64_t lead = static_cast<int64_t>(dims.size()) - static_cast<int64_t>(terms.size());
    if (ellipsis ? lead < 0 : lead != 0) return fail(in);
    if (ellipsis) {
      const std::vector<int64_t> leading(dims.begin(), dims.begin() + lead);
      if (!leadingFrom_) {
        leading_ = leading;
        leadingFrom_ = in.name;
      } else if (leading != leading_) {
        return fail(in);
      }
    }
    for (size_t i = 0; i < terms.size(); i++)
      if (!matchTerm(in, terms[i], dims[lead + i])) return fail(in);
    return true;
  }

  // Whether `size` is what `term` says, binding its name where it is new.
  bool matchTerm(const Input& in, std::string_view term, int64_t size) {
    if (isNumber(term)) return size == std::stoll(std::string(term));
    const size_t split = term.find_first_of("+*");
    if (split != std::string_view::npos && term[split] == '*') {
      const Binding *a = find(term.substr(0, split)), *b = find(term.substr(split + 1));
      return a && b && size == a->size * b->size;
    }
    const int64_t extra = split == std::string_view::npos ? 0 : std::stoll(std::string(term.substr(split + 1)));
    if (const Binding* b = find(term.substr(0, split))) return size == b->size + extra;
    bound_.push_back({term.substr(0, split), size - extra, in});
    return true;
  }

  // "<input> has shape [4, 0] where [..., D] is expected, with …": what the names in the expected shape were bound to
  // by other inputs, and `condition`.
  bool fail(const Input& in, const std::string& condition = "") {
    const std::vector<std::string_view> terms = termsOf(in.shape);
    std::string expected, given;
    const auto note = [&given](const std::string& what) { given += (given.empty() ? ", with " : ", ") + what; };
    for (size_t i = 0; i < terms.size(); i++) {
      expected += (i ? ", " : "") + std::string(terms[i]);
      if (terms[i] == "..." && leadingFrom_ && std::strcmp(leadingFrom_, in.name) != 0) note("... = " + shapeOf(leading_) + " (" + leadingFrom_ + ")");
      for (std::string_view name : namesIn(terms[i])) {
        const Binding* b = find(name);
        if (b && std::strcmp(b->from.name, in.name) != 0) note(std::string(name) + " = " + std::to_string(b->size) + " (" + b->from.name + ")");
      }
    }
    if (!condition.empty()) note(condition);
    setError(std::string(in.name) + " has shape " + shapeOf(dimsOf(in.tensor)) + " where [" + expected + "] is expected" + given);
    return false;
  }

  static std::string shapeOf(const std::vector<int64_t>& dims) {
    std::string out;
    for (size_t i = 0; i < dims.size(); i++) out += (i ? ", " : "") + std::to_string(dims[i]);
    return "[" + out + "]";
  }

  void setError(const std::string& what) { TF_SetStatus(status_, TF_INVALID_ARGUMENT, (std::string(op_) + ": " + what).c_str()); }
};

// ---- GELU: y = x·s with s = σ(2c(x + a x³)) (tanh form) or s = Φ(x) (erf form). -----------------

// e^x in float32 to ~1 ulp (Cody–Waite reduction and Cephes' expf polynomial), written out so that
// the compiler vectorises the loops that call it: std::exp is a library call per element, which
// left the fused GELU slower than TensorFlow's vectorised composed ops.
inline float expApprox(float x) {
  // Clamped where e^x leaves float32's normal range; comparisons and a truncation instead of
  // fmin/fmax/floor, which GCC does not vectorise without assuming finite values (a NaN must stay NaN
  // for the non-finite rule to see it).
  x = x < -87.33f ? -87.33f : x;
  x = x > 88.37f ? 88.37f : x;
  const float t = x * 1.44269504088896341f + 0.5f;
  const int32_t truncated = static_cast<int32_t>(t);
  const int32_t n = truncated - (t < static_cast<float>(truncated) ? 1 : 0);  // ⌊t⌋
  const float k = static_cast<float>(n);
  const float r = x - k * 0.693359375f + k * 2.12194440e-4f;
  float p = 1.9875691500e-4f;
  p = p * r + 1.3981999507e-3f;
  p = p * r + 8.3334519073e-3f;
  p = p * r + 4.1665795894e-2f;
  p = p * r + 1.6666665459e-1f;
  p = p * r + 5.0000001201e-1f;
  p = p * r * r + r + 1.0f;
  const int32_t bits = (n + 127) << 23;
  float scale;
  std::memcpy(&scale, &bits, sizeof scale);
  return p * scale;
}

// erf to 1.5e-7 absolute (Abramowitz & Stegun 7.1.26), vectorisable for the same reason.
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

// ---- LayerNorm over the last axis: x̂ = (x − μ)·r, r = 1/√(σ² + ε), y = x̂·g + b. ------------------

// A kernel's one float attribute (LayerNorm's ε, the normalisation's δ), read when TensorFlow builds the kernel.
struct FloatAttr {
  float value;
};

template <const char* Name>
void* createFloatAttr(TF_OpKernelConstruction* ctx) {
  auto* kernel = new FloatAttr{0.0f};
  TF_Status* status = TF_NewStatus();
  TF_OpKernelConstruction_GetAttrFloat(ctx, Name, &kernel->value, status);
  if (TF_GetCode(status) != TF_OK) TF_OpKernelConstruction_Failure(ctx, status);
  TF_DeleteStatus(status);
  return kernel;
}

void deleteFloatAttr(void* kernel) { delete static_cast<FloatAttr*>(kernel); }
constexpr char kEps[] = "eps";
constexpr char kDelta[] = "delta";

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

// ---- Linear attention's normalisation: the sums [.., D + 1] (numerators, then the denominator) → their ratio. ----

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

// ---- Attention softmax: a row's causal softmax (for the attention kernel below), and the softmax backward. ----

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

// ---- Causal softmax attention over query strips: masked tiles are never computed. -----------------

using RowMajor = Eigen::Matrix<float, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;
using MatrixView = Eigen::Map<RowMajor, 0, Eigen::OuterStride<>>;
using ConstMatrixView = Eigen::Map<const RowMajor, 0, Eigen::OuterStride<>>;

// rows × cols of a row-major matrix at p whose rows are `stride` floats apart.
MatrixView view(float* p, int64_t rows, int64_t cols, int64_t stride) { return MatrixView(p, rows, cols, Eigen::OuterStride<>(stride)); }
ConstMatrixView view(const float* p, int64_t rows, int64_t cols, int64_t stride) {
  return ConstMatrixView(p, rows, cols, Eigen::OuterStride<>(stride));
}

// Query rows per strip. Strip [i0, i1) meets keys [0, i1) only: with L = 256 the products do 62% of
// the full square's work (50% is the triangle), in products large enough to run near Eigen's GEMM
// speed; 32 did no better in docs/benchmarks.md's measurement.
constexpr int64_t kStrip = 64;

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
          view(dks + at + j0 * d, j1 - j0, d, d).noalias() =
              view(ds + j0 * l + j0, l - j0, j1 - j0, l).transpose() * view(qh + j0 * d, l - j0, d, d);
          view(dvs + at + j0 * d, j1 - j0, d, d).noalias() = view(ph + j0 * l + j0, l - j0, j1 - j0, l).transpose() * view(go + j0 * d, l - j0, d, d);
        }
      }
    });
  }
}

// ---- Causal attention of tensor-product features over query strips (SLAY's blocks). --------------

// aq, ak [N, C, Fa], bq, bk [N, C, Fb], values [N, C, D] → out = S·[values, 1] [N, C, D + 1] with S = (aq·akᵀ)⊙(bq·bkᵀ)
// on and below the diagonal (src/model/attention/chunked.ts: the ones column, two products, the masked product of their
// results and a third product in one; the last column, S's row sums, is the linear attention's denominator), and xa = aq·akᵀ, xb = bq·bkᵀ [N, C, C] on and below the diagonal (0 above) for the gradient. Strip by strip as
// SlayformerCausalAttention: the key tiles a strip cannot see are never computed.
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
    const float *gos = data(dout), *aqs = data(aq), *aks = data(ak), *bqs = data(bq), *bks = data(bk), *vs = data(values), *xas = data(xa),
                *xbs = data(xb);
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

// ---- SLAY's feature factors: anchor features and positive random features of unit rows. -----------

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
    for (int64_t r = 0; r < sh.r; r++)
      view(e.data() + r * sh.m, sh.l, sh.m, rm).noalias() = u * view(omegas + (r * sh.h + head) * d * sh.m, d, sh.m, sh.m);
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

// ---- Registration. --------------------------------------------------------------------------------

void sameShapeAsInput(TF_ShapeInferenceContext* ctx, TF_Status* status, int input, int outputs) {
  TF_ShapeHandle* shape = TF_NewShapeHandle();
  TF_ShapeInferenceContextGetInput(ctx, input, shape, status);
  for (int i = 0; i < outputs && TF_GetCode(status) == TF_OK; i++) TF_ShapeInferenceContextSetOutput(ctx, i, shape, status);
  TF_DeleteShapeHandle(shape);
}

void firstInputShape(TF_ShapeInferenceContext* ctx, TF_Status* status) { sameShapeAsInput(ctx, status, 0, 1); }
void secondInputShape(TF_ShapeInferenceContext* ctx, TF_Status* status) { sameShapeAsInput(ctx, status, 1, 1); }

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

struct OpSpec {
  const char* name;
  std::vector<const char*> inputs, outputs, attrs;
  void (*shapes)(TF_ShapeInferenceContext*, TF_Status*);
  void* (*create)(TF_OpKernelConstruction*);
  void (*compute)(void*, TF_OpKernelContext*);
  void (*destroy)(void*);
};

void* noState(TF_OpKernelConstruction*) { return nullptr; }
void noDelete(void*) {}

// The op names, as src/backend/fused-kernels.ts lists them.
const std::vector<OpSpec>& specs() {
  static const std::vector<OpSpec> all = {
      {"SlayformerGeluTanh", {"x: float"}, {"y: float"}, {}, firstInputShape, noState, geluForward<false>, noDelete},
      {"SlayformerGeluTanhGrad", {"dy: float", "x: float"}, {"dx: float"}, {}, secondInputShape, noState, geluBackward<false>, noDelete},
      {"SlayformerGeluErf", {"x: float"}, {"y: float"}, {}, firstInputShape, noState, geluForward<true>, noDelete},
      {"SlayformerGeluErfGrad", {"dy: float", "x: float"}, {"dx: float"}, {}, secondInputShape, noState, geluBackward<true>, noDelete},
      {"SlayformerLayerNorm", {"x: float", "gain: float", "shift: float"}, {"y: float", "xhat: float", "rstd: float"}, {"eps: float"},
       layerNormShapes, createFloatAttr<kEps>, layerNormForward, deleteFloatAttr},
      {"SlayformerLayerNormGrad", {"dy: float", "xhat: float", "rstd: float", "gain: float"}, {"dx: float", "dgain: float", "dshift: float"}, {},
       layerNormGradShapes, noState, layerNormBackward, noDelete},
      {"SlayformerLinearNormalize", {"raw: float"}, {"out: float"}, {"delta: float"}, linearNormalizeShapes, createFloatAttr<kDelta>,
       linearNormalizeForward, deleteFloatAttr},
      {"SlayformerLinearNormalizeGrad", {"dy: float", "raw: float"}, {"draw: float"}, {"delta: float"}, secondInputShape, createFloatAttr<kDelta>,
       linearNormalizeBackward, deleteFloatAttr},
      {"SlayformerAttentionSoftmaxGrad", {"probs: float", "dprobs: float", "dout: float", "out: float"}, {"dscores: float"}, {},
       firstInputShape, noState, attentionSoftmaxBackward, noDelete},
      {"SlayformerCausalAttention", {"q: float", "k: float", "v: float"}, {"out: float", "probs: float"}, {}, causalAttentionShapes, noState,
       causalAttentionForward, noDelete},
      {"SlayformerCausalAttentionGrad", {"dout: float", "q: float", "k: float", "v: float", "probs: float", "out: float"},
       {"dq: float", "dk: float", "dv: float"}, {}, causalAttentionGradShapes, noState, causalAttentionBackward, noDelete},
      {"SlayformerCausalFactorAttention", {"aq: float", "ak: float", "bq: float", "bk: float", "values: float"}, {"out: float", "xa: float", "xb: float"}, {},
       causalFactorAttentionShapes, noState, causalFactorAttentionForward, noDelete},
      {"SlayformerCausalFactorAttentionGrad",
       {"dout: float", "aq: float", "ak: float", "bq: float", "bk: float", "values: float", "xa: float", "xb: float"},
       {"daq: float", "dak: float", "dbq: float", "dbk: float", "dvalues: float"}, {}, causalFactorAttentionGradShapes, noState,
       causalFactorAttentionBackward, noDelete},
      {"SlayformerSlayFactors", {"x: float", "anchors: float", "omegas: float", "nodes: float"}, {"a: float", "b: float"}, {}, slayFactorShapes, noState,
       slayFactorsForward, noDelete},
      {"SlayformerSlayFactorsGrad", {"da: float", "db: float", "x: float", "anchors: float", "omegas: float", "nodes: float"}, {"dx: float"}, {},
       slayFactorGradShapes, noState, slayFactorsBackward, noDelete},
  };
  return all;
}

// Registers every op and its CPU kernel once per process; "" on success, else why not.
std::string registerAll() {
  static std::string result = [] {
    TF_Status* status = TF_NewStatus();
    std::string why;
    for (const OpSpec& spec : specs()) {
      TF_OpDefinitionBuilder* op = TF_NewOpDefinitionBuilder(spec.name);
      for (const char* in : spec.inputs) TF_OpDefinitionBuilderAddInput(op, in);
      for (const char* out : spec.outputs) TF_OpDefinitionBuilderAddOutput(op, out);
      for (const char* attr : spec.attrs) TF_OpDefinitionBuilderAddAttr(op, attr);
      TF_OpDefinitionBuilderSetShapeInferenceFunction(op, spec.shapes);
      TF_RegisterOpDefinition(op, status);
      if (TF_GetCode(status) == TF_OK) {
        TF_KernelBuilder* kernel = TF_NewKernelBuilder(spec.name, "CPU", spec.create, spec.compute, spec.destroy);
        TF_RegisterKernelBuilder(spec.name, kernel, status);
      }
      if (TF_GetCode(status) != TF_OK) {
        why = std::string(spec.name) + ": " + TF_Message(status);
        break;
      }
    }
    TF_DeleteStatus(status);
    return why;
  }();
  return result;
}

}  // namespace

#ifdef SLAYFORMER_STANDALONE_OPS
// Built without Node as a plain op library for TensorFlow's Python (tf.load_op_library), so that
// bench/profile_graph.py can run recorded steps that name these ops: loading registers them.
static const bool registered = registerAll().empty();
#else
// The addon: loading registers the ops; `ops` lists their names, `error` says why registration failed.
NAPI_MODULE_INIT() {
  const std::string why = registerAll();
  napi_value names, name, error;
  napi_create_array(env, &names);
  if (why.empty()) {
    uint32_t i = 0;
    for (const OpSpec& spec : specs()) {
      napi_create_string_utf8(env, spec.name, NAPI_AUTO_LENGTH, &name);
      napi_set_element(env, names, i++, name);
    }
  }
  napi_set_named_property(env, exports, "ops", names);
  if (why.empty()) {
    napi_get_null(env, &error);
  } else {
    napi_create_string_utf8(env, why.c_str(), NAPI_AUTO_LENGTH, &error);
  }
  napi_set_named_property(env, exports, "error", error);
  return exports;
}
#endif
