// The library's one exported symbol: the descriptor of the "cpu" backend.
#include <cstdint>

#include "backend.hpp"
#include "kvcache/kvcache_plugin.h"
#include "plugin_error.hpp"

namespace {

const kvc_plugin_descriptor kDescriptors[] = {
    {sizeof(kvc_plugin_descriptor), KVC_PLUGIN_ABI_VERSION, KVC_PLUGIN_BACKEND, "cpu",
     KVC_VERSION_NUMBER, &kvc::cpu::backend_vtable},
};

}  // namespace

const char* kvc::plugin::plugin_label() { return "cpu backend"; }

extern "C" KVC_PLUGIN_EXPORT int32_t kvc_plugin_entry(const kvc_host_api* /*host*/,
                                                      const kvc_plugin_descriptor** out_descriptors,
                                                      size_t* out_count, kvc_plugin_error* error) {
  if (out_descriptors == nullptr || out_count == nullptr) {
    kvc::cpu::write_error(error, "cpu backend: kvc_plugin_entry needs its out-parameters");
    return KVC_ERR_INVALID_ARGUMENT;
  }
  *out_descriptors = kDescriptors;
  *out_count = sizeof kDescriptors / sizeof kDescriptors[0];
  return KVC_OK;
}
