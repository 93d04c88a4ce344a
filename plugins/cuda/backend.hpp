// The CUDA backend's vtable: device memory from a carved pool, and kernels for every call.
#pragma once

#include "kvcache/kvcache_plugin.h"

namespace kvc::cuda {

extern const kvc_backend_vtable backend_vtable;

}  // namespace kvc::cuda
