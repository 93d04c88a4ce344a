// The CUDA backend's errors: the plugin ABI's one error type (kvcache/kvcache_plugin_support.hpp).
#pragma once

#include "kvcache/kvcache_plugin_support.hpp"

namespace kvc::cuda {

using plugin::fail;
using plugin::PluginError;

}  // namespace kvc::cuda
