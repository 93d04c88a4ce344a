// Errors inside the built-in policy plugins. A policy throws PolicyError (or anything else);
// the adapter (adapter.hpp) turns it into a kvc_status_code and a kvc_plugin_error message, so
// no exception crosses the C ABI.
#pragma once

#include <stdexcept>
#include <string>

#include "kvcache/kvcache.h"

namespace kvc::policies {

class PolicyError : public std::runtime_error {
 public:
  PolicyError(kvc_status_code code, const std::string& message)
      : std::runtime_error(message), code_(code) {}
  kvc_status_code code() const noexcept { return code_; }

 private:
  kvc_status_code code_;
};

// "policy.params.<key>: <problem>", a KVC_ERR_CONFIG error.
[[noreturn]] void config_error(const std::string& key, const std::string& problem);

// A KVC_ERR_INVALID_ARGUMENT error about what the host passed.
[[noreturn]] void argument_error(const std::string& message);

}  // namespace kvc::policies
