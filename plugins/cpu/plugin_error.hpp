// The CPU backend's errors: the in-tree backends' shared ones (plugins/support).
#pragma once

#include "kvcache_support/plugin_error.hpp"

namespace kvc::cpu {

using plugin::fail;
using plugin::PluginError;
using plugin::report_errors;
using plugin::write_error;

}  // namespace kvc::cpu
