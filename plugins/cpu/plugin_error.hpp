// The CPU backend's errors: the plugin ABI's one error type (kvcache/kvcache_plugin_support.hpp).
#pragma once

#include "kvcache/kvcache_plugin_support.hpp"

namespace kvc::cpu {

using plugin::fail;
using plugin::PluginError;

}  // namespace kvc::cpu
