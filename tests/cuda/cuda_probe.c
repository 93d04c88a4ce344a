/* kvc-cuda-probe: can the cuda backend serve a cache on this machine? Creates a context from
 * the default plugin folder and a small cache on the cuda backend.
 *   exit 0: it can; 77: no usable device (NO_DEVICE or UNSUPPORTED, the reason on stderr);
 *   1: anything else (the backend missing, another error).
 * With --check-load it also checks what a machine without a GPU must see: the context loads
 * the cpu backend beside cuda and serves a cpu cache, and the cuda cache is either created or
 * refused with NO_DEVICE/UNSUPPORTED and a message; exit 0 in both cases. */
#include <stdio.h>
#include <string.h>

#include "kvcache/kvcache.h"

static int has_backend(const kvc_context *context, const char *name) {
  size_t i, n = kvc_context_plugin_count(context);
  for (i = 0; i < n; ++i) {
    kvc_plugin_info info;
    kvc_status *status;
    memset(&info, 0, sizeof info);
    info.struct_size = sizeof info;
    status = kvc_context_plugin_info(context, i, &info);
    if (status) {
      kvc_status_free(status);
      continue;
    }
    if (info.kind == KVC_PLUGIN_BACKEND && strcmp(info.name, name) == 0) return 1;
  }
  return 0;
}

/* The status of creating a small cache on `backend` (NULL: it was created and destroyed). */
static kvc_status *try_cache(kvc_context *context, const char *backend) {
  kvc_cache_params params;
  kvc_cache *cache = NULL;
  kvc_status *status;
  kvc_cache_params_init(&params);
  params.head_dim = 64;
  params.backend = backend;
  status = kvc_cache_create(context, &params, &cache);
  if (!status) kvc_cache_destroy(cache);
  return status;
}

int main(int argc, char **argv) {
  const int check_load = argc > 1 && strcmp(argv[1], "--check-load") == 0;
  kvc_context *context = NULL;
  kvc_status *status = kvc_context_create(NULL, &context);
  kvc_status_code code;
  if (status) {
    fprintf(stderr, "kvc-cuda-probe: kvc_context_create: %s\n", kvc_status_message(status));
    kvc_status_free(status);
    return 1;
  }
  if (!has_backend(context, "cuda")) {
    fprintf(stderr, "kvc-cuda-probe: the context has no cuda backend\n");
    kvc_context_destroy(context);
    return 1;
  }
  if (check_load) {
    if (!has_backend(context, "cpu")) {
      fprintf(stderr, "kvc-cuda-probe: the cpu backend was not loaded beside cuda\n");
      kvc_context_destroy(context);
      return 1;
    }
    status = try_cache(context, "cpu");
    if (status) {
      fprintf(stderr, "kvc-cuda-probe: a cpu cache failed: %s\n", kvc_status_message(status));
      kvc_status_free(status);
      kvc_context_destroy(context);
      return 1;
    }
  }
  status = try_cache(context, "cuda");
  kvc_context_destroy(context);
  if (!status) {
    printf("kvc-cuda-probe: the cuda backend has a device\n");
    return 0;
  }
  code = kvc_status_get_code(status);
  fprintf(stderr, "kvc-cuda-probe: %s: %s\n", kvc_status_code_name(code), kvc_status_message(status));
  if (code != KVC_ERR_NO_DEVICE && code != KVC_ERR_UNSUPPORTED) {
    kvc_status_free(status);
    return 1;
  }
  if (check_load && strstr(kvc_status_message(status), "cuda") == NULL) {
    fprintf(stderr, "kvc-cuda-probe: the message does not name the cuda backend\n");
    kvc_status_free(status);
    return 1;
  }
  kvc_status_free(status);
  return check_load ? 0 : 77;
}
