// Points file descriptor 2 at /dev/null and back, around the loading of TensorFlow (tensorflow.ts):
// its C++ static initialisers print INFO lines through absl before absl's logging is set up, which no
// setting silences. Written by hand because Node has no dup/dup2 and no maintained package offers
// them; built by `npm run setup:tensorflow` next to the tfjs-node binding.
#include <fcntl.h>
#include <node_api.h>
#include <unistd.h>

// silence() → a copy of the original descriptor 2 (or -1 when nothing was changed).
static napi_value silence(napi_env env, napi_callback_info info) {
  (void)info;
  int saved = dup(2);
  int devnull = open("/dev/null", O_WRONLY);
  if (saved >= 0 && devnull >= 0 && dup2(devnull, 2) < 0) {
    close(saved);
    saved = -1;
  }
  if (devnull >= 0) close(devnull);
  napi_value result;
  napi_create_int32(env, saved, &result);
  return result;
}

// restore(saved): descriptor 2 is the original again.
static napi_value restore(napi_env env, napi_callback_info info) {
  size_t argc = 1;
  napi_value argv[1];
  int32_t saved = -1;
  napi_get_cb_info(env, info, &argc, argv, NULL, NULL);
  if (argc == 1) napi_get_value_int32(env, argv[0], &saved);
  if (saved >= 0) {
    dup2(saved, 2);
    close(saved);
  }
  return NULL;
}

NAPI_MODULE_INIT() {
  napi_value fn;
  napi_create_function(env, "silence", NAPI_AUTO_LENGTH, silence, NULL, &fn);
  napi_set_named_property(env, exports, "silence", fn);
  napi_create_function(env, "restore", NAPI_AUTO_LENGTH, restore, NULL, &fn);
  napi_set_named_property(env, exports, "restore", fn);
  return exports;
}
