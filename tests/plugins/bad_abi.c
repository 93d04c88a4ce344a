/* A backend plugin built against a plugin ABI major the host does not know
 * (KVC_PLUGIN_ABI_MAJOR + 1). The host must refuse it with KVC_ERR_PLUGIN and name the file. */
#include "kvcache/kvcache_plugin.h"

static const kvc_backend_vtable bad_vtable = {.struct_size = sizeof(kvc_backend_vtable)};

static const kvc_plugin_descriptor bad_descriptor = {
    sizeof(kvc_plugin_descriptor),
    ((uint32_t)(KVC_PLUGIN_ABI_MAJOR + 1) << 16) | KVC_PLUGIN_ABI_MINOR,
    KVC_PLUGIN_BACKEND,
    "test_bad_abi",
    1,
    &bad_vtable};

KVC_PLUGIN_EXPORT int32_t kvc_plugin_entry(
    const kvc_host_api *host, const kvc_plugin_descriptor **out_descriptors, size_t *out_count,
    kvc_plugin_error *error) {
  (void)host;
  (void)error;
  *out_descriptors = &bad_descriptor;
  *out_count = 1;
  return KVC_OK;
}
