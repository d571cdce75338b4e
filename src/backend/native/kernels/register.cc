// Registers the fused CPU kernels (docs/backends.md, "Fused CPU kernels"): every op of the kernel table
// (src/backend/native/kernels.ts, written by the set-up as kernel_table.inc beside these files) with the functions its
// kernel's file added (SLAYFORMER_KERNEL), against TensorFlow's stable C API for ops and kernels (tensorflow/c/ops.h,
// kernels.h: plain C, the wheel's own library). Built by `npm run setup:tensorflow` with node-gyp and loaded as a Node
// addon after the binding: loading registers the ops and their CPU kernels in the process's TensorFlow, so that eager
// calls and recorded functions can name them (src/backend/tensorflow.ts registers the tfjs kernels that do). A table
// entry no file implements, or a kernel the table lacks, registers nothing and says which.
#ifndef SLAYFORMER_STANDALONE_OPS
#include <node_api.h>
#endif

#include "kernel.h"

namespace slayformer {
namespace {

// An op as the kernel table declares it: TensorFlow's "name: type" for each input, output and attribute.
struct OpSignature {
  const char* name;
  std::vector<const char*> inputs, outputs, attrs;
};

const std::vector<OpSignature>& kernelTable() {
  static const std::vector<OpSignature> table = {
#include "kernel_table.inc"
  };
  return table;
}

std::vector<KernelFunctions>& kernelFunctions() {
  static std::vector<KernelFunctions> added;
  return added;
}

const KernelFunctions* functionsOf(std::string_view name) {
  for (const KernelFunctions& k : kernelFunctions())
    if (name == k.name) return &k;
  return nullptr;
}

// Why the table and the kernels' files disagree, or "".
std::string tableMismatch() {
  for (const OpSignature& op : kernelTable())
    if (!functionsOf(op.name)) return std::string(op.name) + ": in the kernel table (src/backend/native/kernels.ts) but no kernel file implements it";
  for (const KernelFunctions& k : kernelFunctions()) {
    const bool listed = std::any_of(kernelTable().begin(), kernelTable().end(), [&](const OpSignature& op) { return std::string_view(op.name) == k.name; });
    if (!listed) return std::string(k.name) + ": implemented but not in the kernel table (src/backend/native/kernels.ts)";
  }
  return "";
}

// Registers every op and its CPU kernel once per process; "" on success, else why not.
std::string registerAll() {
  static std::string result = [] {
    std::string why = tableMismatch();
    if (!why.empty()) return why;
    TF_Status* status = TF_NewStatus();
    for (const OpSignature& op : kernelTable()) {
      const KernelFunctions* kernel = functionsOf(op.name);
      TF_OpDefinitionBuilder* builder = TF_NewOpDefinitionBuilder(op.name);
      for (const char* in : op.inputs) TF_OpDefinitionBuilderAddInput(builder, in);
      for (const char* out : op.outputs) TF_OpDefinitionBuilderAddOutput(builder, out);
      for (const char* attr : op.attrs) TF_OpDefinitionBuilderAddAttr(builder, attr);
      TF_OpDefinitionBuilderSetShapeInferenceFunction(builder, kernel->shapes);
      TF_RegisterOpDefinition(builder, status);
      if (TF_GetCode(status) == TF_OK) {
        TF_KernelBuilder* cpu = TF_NewKernelBuilder(op.name, "CPU", kernel->create, kernel->compute, kernel->destroy);
        TF_RegisterKernelBuilder(op.name, cpu, status);
      }
      if (TF_GetCode(status) != TF_OK) {
        why = std::string(op.name) + ": " + TF_Message(status);
        break;
      }
    }
    TF_DeleteStatus(status);
    return why;
  }();
  return result;
}

}  // namespace

void addKernel(const KernelFunctions& kernel) { kernelFunctions().push_back(kernel); }

}  // namespace slayformer

#ifdef SLAYFORMER_STANDALONE_OPS
// Built without Node as a plain op library for TensorFlow's Python (tf.load_op_library), so that
// bench/profile_graph.py can run recorded steps that name these ops: loading registers them, after every kernel's
// file has added its functions (priority 101); why it could not is printed, as the addon's `error` says it.
__attribute__((constructor(102))) static void registerOnLoad() {
  const std::string why = slayformer::registerAll();
  if (!why.empty()) std::fprintf(stderr, "slayformer fused kernels not registered: %s\n", why.c_str());
}
#else
// The addon: loading registers the ops; `ops` lists their names, `error` says why registration failed.
NAPI_MODULE_INIT() {
  const std::string why = slayformer::registerAll();
  napi_value names, name, error;
  napi_create_array(env, &names);
  if (why.empty()) {
    uint32_t i = 0;
    for (const slayformer::OpSignature& op : slayformer::kernelTable()) {
      napi_create_string_utf8(env, op.name, NAPI_AUTO_LENGTH, &name);
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
