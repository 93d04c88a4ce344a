// The library's one exported symbol: the descriptor of the "cuda" backend. It touches no CUDA
// API, so the library loads on machines without a GPU or driver; the device is looked for
// when a cache creates an instance (NO_DEVICE there).
#include <cstdint>

#include "backend.hpp"
#include "kvcache/kvcache_plugin.h"
#include "plugin_error.hpp"

namespace {

const kvc_plugin_descriptor kDescriptors[] = {
    {sizeof(kvc_plugin_descriptor), KVC_PLUGIN_ABI_VERSION, KVC_PLUGIN_BACKEND, "cuda",
     KVC_VERSION_NUMBER, &kvc::cuda::backend_vtable},
};

}  // namespace

const char* kvc::plugin::plugin_label() { return "cuda backend"; }

extern "C" KVC_PLUGIN_EXPORT int32_t kvc_plugin_entry(const kvc_host_api* /*host*/,
                                                      const kvc_plugin_descriptor** out_descriptors,
                                                      size_t* out_count, kvc_plugin_error* error) {
  if (out_descriptors == nullptr || out_count == nullptr) {
    kvc::cuda::write_error(error, "cuda backend: kvc_plugin_entry needs its out-parameters");
    return KVC_ERR_INVALID_ARGUMENT;
  }
  *out_descriptors = kDescriptors;
  *out_count = sizeof kDescriptors / sizeof kDescriptors[0];
  return KVC_OK;
}
