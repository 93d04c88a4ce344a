// Errors inside the built-in policy plugins. A policy throws kvc::Error (kvcache_error.hpp) or
// anything else; the adapter (adapter.hpp) turns it into a kvc_status_code and a kvc_plugin_error message, so no exception crosses the C ABI.
#pragma once

#include <string>

#include "kvcache/kvcache_plugin_support.hpp"

namespace kvc::policies {

// "policy.params.<key>: <problem>", a KVC_ERR_CONFIG error.
[[noreturn]] void config_error(const std::string& key, const std::string& problem);

// A KVC_ERR_INVALID_ARGUMENT error about what the host passed.
[[noreturn]] void argument_error(const std::string& message);

}  // namespace kvc::policies
