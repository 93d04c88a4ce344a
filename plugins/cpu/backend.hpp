// The CPU backend's vtable: host memory, memcpy copies, and the append/attention kernels.
#pragma once

#include "kvcache/kvcache_plugin.h"

namespace kvc::cpu {

extern const kvc_backend_vtable backend_vtable;

}  // namespace kvc::cpu
