// The CPU backend's errors: kvc::Error and fail() (kvcache/kvcache_plugin_support.hpp).
#pragma once

#include "kvcache/kvcache_plugin_support.hpp"

namespace kvc::cpu {

using plugin::fail;

}  // namespace kvc::cpu
