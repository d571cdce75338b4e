// TensorFlow functions and collectives for tfjs-node's binding: a recorded GraphDef registered in the binding's eager
// context as a function (what tf.function does in eager mode), then called by name like any op on the
// backend's device. Inputs and outputs stay TFE_TensorHandles on that device: nothing is copied to
// host memory, unlike the binding's SavedModel session route (docs/graph-functions.md). The same
// context joins a cluster of processes for collective ops (docs/distributed.md): enableCollectives
// starts this task's gRPC server and the coordination service's heartbeats.
//
// Written by hand because tfjs-node has no such entry points and no maintained package offers them;
// `npm run setup:tensorflow` compiles this file into the binding (tensorflow-setup.ts,
// patchBindingSources), made a friend of TFJSBackend so that it can use the context, the handle table
// and the device the binding already owns.
#include <node_api.h>

#include <string>
#include <vector>

#include "tensorflow/c/c_api.h"
#include "tensorflow/c/c_api_experimental.h"
#include "tensorflow/c/eager/c_api.h"
#include "tensorflow/c/eager/c_api_experimental.h"
#include "tfjs_backend.h"
#include "utils.h"

namespace tfnodejs {

struct FunctionOps {
  static TFJSBackend* Backend(napi_env env) {
    TFJSBackend* backend = nullptr;
    napi_get_instance_data(env, reinterpret_cast<void**>(&backend));
    if (!backend) NAPI_THROW_ERROR(env, "the tfjs binding is not initialised");
    return backend;
  }

  static bool Args(napi_env env, napi_callback_info info, size_t want, napi_value* args) {
    size_t argc = want;
    if (napi_get_cb_info(env, info, &argc, args, nullptr, nullptr) != napi_ok || argc < want) {
      NAPI_THROW_ERROR(env, "expected %zu arguments, got %zu", want, argc);
      return false;
    }
    return true;
  }

  static bool String(napi_env env, napi_value value, std::string& out) {
    size_t length = 0;
    if (napi_get_value_string_utf8(env, value, nullptr, 0, &length) != napi_ok) {
      NAPI_THROW_ERROR(env, "expected a string");
      return false;
    }
    out.resize(length + 1);
    napi_get_value_string_utf8(env, value, &out[0], length + 1, &length);
    out.resize(length);
    return true;
  }

  static bool Strings(napi_env env, napi_value array, std::vector<std::string>& out) {
    uint32_t length = 0;
    if (napi_get_array_length(env, array, &length) != napi_ok) {
      NAPI_THROW_ERROR(env, "expected an array of strings");
      return false;
    }
    out.resize(length);
    for (uint32_t i = 0; i < length; i++) {
      napi_value item;
      napi_get_element(env, array, i, &item);
      if (!String(env, item, out[i])) return false;
    }
    return true;
  }

  static bool Fail(napi_env env, TF_Status* status, const char* what, const std::string& name) {
    if (TF_GetCode(status) == TF_OK) return false;
    NAPI_THROW_ERROR(env, "%s '%s': %s", what, name.c_str(), TF_Message(status));
    return true;
  }

  // "node:index" → the graph's output it names.
  static bool Output(napi_env env, TF_Graph* graph, const std::string& ref, TF_Output& out) {
    const size_t colon = ref.rfind(':');
    const std::string node = colon == std::string::npos ? ref : ref.substr(0, colon);
    out.oper = TF_GraphOperationByName(graph, node.c_str());
    out.index = colon == std::string::npos ? 0 : std::stoi(ref.substr(colon + 1));
    if (!out.oper) NAPI_THROW_ERROR(env, "the graph has no node '%s'", node.c_str());
    return out.oper != nullptr;
  }

  // registerFunction(name, graphDef: Uint8Array, inputs: string[], outputs: string[]): the GraphDef
  // becomes function `name` of the context, taking `inputs` (placeholders) and returning `outputs`.
  static napi_value Register(napi_env env, napi_callback_info info) {
    napi_value args[4];
    if (!Args(env, info, 4, args)) return nullptr;
    TFJSBackend* backend = Backend(env);
    std::string name;
    std::vector<std::string> input_refs, output_refs;
    if (!backend || !String(env, args[0], name) || !Strings(env, args[2], input_refs) || !Strings(env, args[3], output_refs)) return nullptr;
    void* bytes = nullptr;
    size_t length = 0;
    bool is_typed_array = false;
    napi_is_typedarray(env, args[1], &is_typed_array);
    if (!is_typed_array) {
      NAPI_THROW_ERROR(env, "registerFunction: the GraphDef must be a Uint8Array");
      return nullptr;
    }
    napi_typedarray_type type;
    napi_value buffer;
    size_t offset = 0;
    napi_get_typedarray_info(env, args[1], &type, &length, &bytes, &buffer, &offset);
    if (TFE_ContextHasFunction(backend->tfe_context_, name.c_str())) {
      NAPI_THROW_ERROR(env, "a function named '%s' is already registered", name.c_str());
      return nullptr;
    }

    TF_Status* status = TF_NewStatus();
    TF_Graph* graph = TF_NewGraph();
    TF_Buffer* graph_def = TF_NewBufferFromString(bytes, length);
    TF_ImportGraphDefOptions* import_options = TF_NewImportGraphDefOptions();
    TF_Function* function = nullptr;
    TF_GraphImportGraphDef(graph, graph_def, import_options, status);
    if (!Fail(env, status, "importing the graph of function", name)) {
      std::vector<TF_Output> inputs(input_refs.size()), outputs(output_refs.size());
      bool found = true;
      for (size_t i = 0; found && i < inputs.size(); i++) found = Output(env, graph, input_refs[i], inputs[i]);
      for (size_t i = 0; found && i < outputs.size(); i++) found = Output(env, graph, output_refs[i], outputs[i]);
      if (found) {
        // num_opers = -1: every operation but the input placeholders is the function's body.
        function = TF_GraphToFunction(graph, name.c_str(), 0, -1, nullptr, inputs.size(), inputs.data(), outputs.size(), outputs.data(), nullptr, nullptr,
                                      "slayformer recorded step", status);
        if (!Fail(env, status, "converting the graph to function", name)) {
          TFE_ContextAddFunction(backend->tfe_context_, function, status);
          Fail(env, status, "registering function", name);
        }
      }
    }
    if (function) TF_DeleteFunction(function);
    TF_DeleteImportGraphDefOptions(import_options);
    TF_DeleteBuffer(graph_def);
    TF_DeleteGraph(graph);
    TF_DeleteStatus(status);
    return nullptr;
  }

  // The backend and the function name of a call whose one argument is that name.
  static TFJSBackend* Named(napi_env env, napi_callback_info info, std::string& name) {
    napi_value args[1];
    if (!Args(env, info, 1, args)) return nullptr;
    TFJSBackend* backend = Backend(env);
    return backend && String(env, args[0], name) ? backend : nullptr;
  }

  // removeFunction(name)
  static napi_value Remove(napi_env env, napi_callback_info info) {
    std::string name;
    TFJSBackend* backend = Named(env, info, name);
    if (!backend) return nullptr;
    if (!TFE_ContextHasFunction(backend->tfe_context_, name.c_str())) {
      NAPI_THROW_ERROR(env, "no function named '%s' is registered", name.c_str());
      return nullptr;
    }
    TF_Status* status = TF_NewStatus();
    TFE_ContextRemoveFunction(backend->tfe_context_, name.c_str(), status);
    Fail(env, status, "removing function", name);
    TF_DeleteStatus(status);
    return nullptr;
  }

  // hasFunction(name) → boolean
  static napi_value Has(napi_env env, napi_callback_info info) {
    std::string name;
    TFJSBackend* backend = Named(env, info, name);
    if (!backend) return nullptr;
    napi_value result;
    napi_get_boolean(env, TFE_ContextHasFunction(backend->tfe_context_, name.c_str()) != 0, &result);
    return result;
  }

  // callFunction(name, inputIds: number[], numOutputs, xla: boolean) → tensor infos, as executeOp.
  // The call names the backend's device (GPU:0 where there is one, else CPU:0); xla asks TensorFlow
  // to compile the whole function with XLA (_XlaMustCompile, what jit_compile=True sets).
  static napi_value Call(napi_env env, napi_callback_info info) {
    napi_value args[4];
    if (!Args(env, info, 4, args)) return nullptr;
    TFJSBackend* backend = Backend(env);
    std::string name;
    if (!backend || !String(env, args[0], name)) return nullptr;
    uint32_t num_inputs = 0;
    int32_t num_outputs = 0;
    bool xla = false;
    if (napi_get_array_length(env, args[1], &num_inputs) != napi_ok || napi_get_value_int32(env, args[2], &num_outputs) != napi_ok ||
        napi_get_value_bool(env, args[3], &xla) != napi_ok || num_outputs < 0) {
      NAPI_THROW_ERROR(env, "callFunction(name, inputIds[], numOutputs, xla) got arguments of the wrong types");
      return nullptr;
    }
    TF_Status* status = TF_NewStatus();
    TFE_Op* op = TFE_NewOp(backend->tfe_context_, name.c_str(), status);
    bool ok = !Fail(env, status, "calling function", name);
    if (ok) {
      TFE_OpSetDevice(op, backend->device_name.c_str(), status);
      ok = !Fail(env, status, "placing function", name);
    }
    for (uint32_t i = 0; ok && i < num_inputs; i++) {
      napi_value item;
      int32_t id = -1;
      napi_get_element(env, args[1], i, &item);
      napi_get_value_int32(env, item, &id);
      auto handle = backend->tfe_handle_map_.find(id);
      if (handle == backend->tfe_handle_map_.end()) {
        NAPI_THROW_ERROR(env, "function '%s': input %u is not a live tensor (id %d)", name.c_str(), i, id);
        ok = false;
      } else {
        TFE_OpAddInput(op, handle->second, status);
        ok = !Fail(env, status, "adding an input to function", name);
      }
    }
    if (ok && xla) TFE_OpSetAttrBool(op, "_XlaMustCompile", 1);
    std::vector<TFE_TensorHandle*> results(num_outputs, nullptr);
    int count = num_outputs;
    if (ok) {
      TFE_Execute(op, results.data(), &count, status);
      ok = !Fail(env, status, "running function", name);
    }
    napi_value infos = nullptr;
    if (ok && count != num_outputs) {
      for (int i = 0; i < count; i++) TFE_DeleteTensorHandle(results[i]);
      NAPI_THROW_ERROR(env, "function '%s' returned %d outputs, %d expected", name.c_str(), count, num_outputs);
      ok = false;
    }
    if (ok) {
      napi_create_array_with_length(env, count, &infos);
      for (int i = 0; i < count; i++) napi_set_element(env, infos, i, backend->GenerateOutputTensorInfo(env, results[i]));
    }
    if (op) TFE_DeleteOp(op);
    TF_DeleteStatus(status);
    return infos;
  }

  // enableCollectives(serverDefText, taskPrefix) → the new device name. The ServerDef (text format,
  // docs/distributed.md) starts this task's gRPC server; local devices are renamed from
  // /job:localhost/... to `taskPrefix`/device:..., so the binding's device follows (the same kind).
  static napi_value EnableCollectives(napi_env env, napi_callback_info info) {
    napi_value args[2];
    if (!Args(env, info, 2, args)) return nullptr;
    TFJSBackend* backend = Backend(env);
    std::string text, prefix;
    if (!backend || !String(env, args[0], text) || !String(env, args[1], prefix)) return nullptr;
    TF_Status* status = TF_NewStatus();
    TF_Buffer* server_def = TFE_GetServerDef(text.c_str(), status);
    bool ok = !Fail(env, status, "parsing the ServerDef of", prefix);
    if (ok) {
      TFE_EnableCollectiveOps(backend->tfe_context_, server_def->data, server_def->length, status);
      ok = !Fail(env, status, "enabling collective ops for", prefix);
    }
    if (server_def) TF_DeleteBuffer(server_def);
    napi_value result = nullptr;
    if (ok) {
      // The device of the same kind (…/device:CPU:0 or …/device:GPU:0) under the new task name.
      const std::string& old_name = backend->device_name;
      const size_t kind = old_name.find("/device:");
      const std::string wanted = prefix + (kind == std::string::npos ? old_name : old_name.substr(kind));
      TF_DeviceList* devices = TFE_ContextListDevices(backend->tfe_context_, status);
      bool found = false;
      for (int i = 0; !found && TF_GetCode(status) == TF_OK && i < TF_DeviceListCount(devices); i++) {
        found = wanted == TF_DeviceListName(devices, i, status);
      }
      if (devices) TF_DeleteDeviceList(devices);
      if (found) {
        backend->device_name = wanted;
        napi_create_string_utf8(env, wanted.c_str(), wanted.size(), &result);
      } else {
        NAPI_THROW_ERROR(env, "enabling collective ops: no device '%s' afterwards", wanted.c_str());
      }
    }
    TF_DeleteStatus(status);
    return result;
  }

  // checkPeerHealth(task, timeoutMs) → null when `task` (/job:worker/replica:0/task:N) answers, else why not.
  static napi_value CheckPeerHealth(napi_env env, napi_callback_info info) {
    napi_value args[2];
    if (!Args(env, info, 2, args)) return nullptr;
    TFJSBackend* backend = Backend(env);
    std::string task;
    int64_t timeout_ms = 0;
    if (!backend || !String(env, args[0], task) || napi_get_value_int64(env, args[1], &timeout_ms) != napi_ok) return nullptr;
    TF_Status* status = TF_NewStatus();
    TFE_CollectiveOpsCheckPeerHealth(backend->tfe_context_, task.c_str(), timeout_ms, status);
    napi_value result;
    if (TF_GetCode(status) == TF_OK)
      napi_get_null(env, &result);
    else
      napi_create_string_utf8(env, TF_Message(status), NAPI_AUTO_LENGTH, &result);
    TF_DeleteStatus(status);
    return result;
  }

  // setClusterValue(key, value): a key-value pair in the coordination service, which every task reads.
  static napi_value SetClusterValue(napi_env env, napi_callback_info info) {
    napi_value args[2];
    if (!Args(env, info, 2, args)) return nullptr;
    TFJSBackend* backend = Backend(env);
    std::string key, value;
    if (!backend || !String(env, args[0], key) || !String(env, args[1], value)) return nullptr;
    TF_Status* status = TF_NewStatus();
    TFE_InsertConfigKeyValue(backend->tfe_context_, key.c_str(), value.c_str(), status);
    Fail(env, status, "setting the cluster value", key);
    TF_DeleteStatus(status);
    return nullptr;
  }

  // clusterValue(key, timeoutMs) → the value some task set under `key`, waiting for it up to timeoutMs.
  static napi_value ClusterValue(napi_env env, napi_callback_info info) {
    napi_value args[2];
    if (!Args(env, info, 2, args)) return nullptr;
    TFJSBackend* backend = Backend(env);
    std::string key;
    int64_t timeout_ms = 0;
    if (!backend || !String(env, args[0], key) || napi_get_value_int64(env, args[1], &timeout_ms) != napi_ok) return nullptr;
    TF_Status* status = TF_NewStatus();
    TF_Buffer* value = TF_NewBuffer();
    TFE_GetConfigKeyValue(backend->tfe_context_, key.c_str(), timeout_ms, value, status);
    napi_value result = nullptr;
    if (!Fail(env, status, "reading the cluster value", key)) {
      napi_create_string_utf8(env, static_cast<const char*>(value->data), value->length, &result);
    }
    TF_DeleteBuffer(value);
    TF_DeleteStatus(status);
    return result;
  }

  // reportErrorToCluster(message): every other task's collectives fail at once with `message` (a rank
  // that ends on an error says so, instead of leaving the others to find out from missing heartbeats).
  static napi_value ReportError(napi_env env, napi_callback_info info) {
    napi_value args[1];
    if (!Args(env, info, 1, args)) return nullptr;
    TFJSBackend* backend = Backend(env);
    std::string message;
    if (!backend || !String(env, args[0], message)) return nullptr;
    TF_Status* status = TF_NewStatus();
    TFE_ReportErrorToCluster(backend->tfe_context_, TF_ABORTED, message.c_str(), status);
    Fail(env, status, "reporting an error to the cluster", message);
    TF_DeleteStatus(status);
    return nullptr;
  }

  // deviceName() → the device ops and functions run on (the binding's choice: GPU:0 if any).
  static napi_value Device(napi_env env, napi_callback_info info) {
    TFJSBackend* backend = Backend(env);
    if (!backend) return nullptr;
    napi_value result;
    napi_create_string_utf8(env, backend->device_name.c_str(), backend->device_name.size(), &result);
    return result;
  }
};

// Adds registerFunction, removeFunction, hasFunction, callFunction, deviceName and the collective
// entry points (enableCollectives, checkPeerHealth, setClusterValue, clusterValue, reportErrorToCluster) to the binding's
// exports; called from InitTFNodeJSBinding (patched in at set-up).
void RegisterFunctionOps(napi_env env, napi_value exports) {
  napi_property_descriptor properties[] = {
      {"registerFunction", nullptr, FunctionOps::Register, nullptr, nullptr, nullptr, napi_default, nullptr},
      {"removeFunction", nullptr, FunctionOps::Remove, nullptr, nullptr, nullptr, napi_default, nullptr},
      {"hasFunction", nullptr, FunctionOps::Has, nullptr, nullptr, nullptr, napi_default, nullptr},
      {"callFunction", nullptr, FunctionOps::Call, nullptr, nullptr, nullptr, napi_default, nullptr},
      {"deviceName", nullptr, FunctionOps::Device, nullptr, nullptr, nullptr, napi_default, nullptr},
      {"enableCollectives", nullptr, FunctionOps::EnableCollectives, nullptr, nullptr, nullptr, napi_default, nullptr},
      {"checkPeerHealth", nullptr, FunctionOps::CheckPeerHealth, nullptr, nullptr, nullptr, napi_default, nullptr},
      {"setClusterValue", nullptr, FunctionOps::SetClusterValue, nullptr, nullptr, nullptr, napi_default, nullptr},
      {"clusterValue", nullptr, FunctionOps::ClusterValue, nullptr, nullptr, nullptr, napi_default, nullptr},
      {"reportErrorToCluster", nullptr, FunctionOps::ReportError, nullptr, nullptr, nullptr, napi_default, nullptr},
  };
  napi_define_properties(env, exports, sizeof(properties) / sizeof(properties[0]), properties);
}

}  // namespace tfnodejs
