// What every fused CPU kernel shares (docs/backends.md, "Fused CPU kernels"): the includes, the row-parallel loop,
// the 16-lane sums, a kernel call's inputs and outputs, the input shape checks (docs/bounds.md, "Native kernels"),
// the vectorisable e^x, Eigen views, and SLAYFORMER_KERNEL, by which a kernel's file hands its functions to the
// registration (register.cc), which registers every op of the kernel table (src/backend/native/kernels.ts) with them.
#ifndef SLAYFORMER_KERNEL_H_
#define SLAYFORMER_KERNEL_H_

#include <algorithm>
#include <atomic>
#include <cctype>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <functional>
#include <initializer_list>
#include <memory>
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

namespace slayformer {

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
inline float* scratch(size_t n) {
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

inline std::vector<int64_t> dimsOf(const TF_Tensor* t) {
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

inline float* data(TF_Tensor* t) { return static_cast<float*>(TF_TensorData(t)); }

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

inline void deleteFloatAttr(void* kernel) { delete static_cast<FloatAttr*>(kernel); }

// ---- Eigen views and query strips, for the kernels whose products run on Eigen. ----

using RowMajor = Eigen::Matrix<float, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;
using MatrixView = Eigen::Map<RowMajor, 0, Eigen::OuterStride<>>;
using ConstMatrixView = Eigen::Map<const RowMajor, 0, Eigen::OuterStride<>>;

// rows × cols of a row-major matrix at p whose rows are `stride` floats apart.
inline MatrixView view(float* p, int64_t rows, int64_t cols, int64_t stride) { return MatrixView(p, rows, cols, Eigen::OuterStride<>(stride)); }
inline ConstMatrixView view(const float* p, int64_t rows, int64_t cols, int64_t stride) { return ConstMatrixView(p, rows, cols, Eigen::OuterStride<>(stride)); }

// Query rows per strip. Strip [i0, i1) meets keys [0, i1) only: with L = 256 the products do 62% of
// the full square's work (50% is the triangle), in products large enough to run near Eigen's GEMM
// speed; 32 did no better in docs/benchmarks.md's measurement.
inline constexpr int64_t kStrip = 64;

// ---- Registration. ----

// Shape inference: outputs 0 … outputs − 1 have input `input`'s shape.
inline void sameShapeAsInput(TF_ShapeInferenceContext* ctx, TF_Status* status, int input, int outputs) {
  TF_ShapeHandle* shape = TF_NewShapeHandle();
  TF_ShapeInferenceContextGetInput(ctx, input, shape, status);
  for (int i = 0; i < outputs && TF_GetCode(status) == TF_OK; i++) TF_ShapeInferenceContextSetOutput(ctx, i, shape, status);
  TF_DeleteShapeHandle(shape);
}

inline void firstInputShape(TF_ShapeInferenceContext* ctx, TF_Status* status) { sameShapeAsInput(ctx, status, 0, 1); }
inline void secondInputShape(TF_ShapeInferenceContext* ctx, TF_Status* status) { sameShapeAsInput(ctx, status, 1, 1); }

// A kernel without state between calls.
inline void* noState(TF_OpKernelConstruction*) { return nullptr; }
inline void noDelete(void*) {}

// What a kernel's file provides for one op of the kernel table: its shape inference and its CPU kernel's functions.
struct KernelFunctions {
  const char* name;
  void (*shapes)(TF_ShapeInferenceContext*, TF_Status*);
  void* (*create)(TF_OpKernelConstruction*);
  void (*compute)(void*, TF_OpKernelContext*);
  void (*destroy)(void*);
};

// Adds a kernel's functions to those the registration looks up by op name (register.cc).
void addKernel(const KernelFunctions& kernel);

}  // namespace slayformer

// In a kernel's file, at namespace scope: the functions of the op NAME (an op of the kernel table), added when the
// library loads. A constructor of priority 101 runs before every unprioritised initialiser and before the standalone
// library's registration (register.cc), whatever the order the files were linked in.
#define SLAYFORMER_KERNEL(NAME, SHAPES, CREATE, COMPUTE, DESTROY) \
  __attribute__((constructor(101))) static void add##NAME() { ::slayformer::addKernel({#NAME, SHAPES, CREATE, COMPUTE, DESTROY}); }

#endif  // SLAYFORMER_KERNEL_H_
