// The CUDA backend's errors: kvc::Error and fail() (kvcache/kvcache_plugin_support.hpp).
#pragma once

#include "kvcache/kvcache_plugin_support.hpp"

namespace kvc::cuda {

using plugin::fail;

}  // namespace kvc::cuda
