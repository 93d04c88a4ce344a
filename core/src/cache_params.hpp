// The defaults and checks of a cache's parameters, in one place for every entry point
// (kvc_cache_params from C, the YAML cache section), so they accept and refuse the same
// values with the same messages.
#pragma once

#include <string>
#include <utility>

#include "config.hpp"
#include "error.hpp"

namespace kvc {

// An INVALID_ARGUMENT error about one parameter; field() is its name, e.g. "q_heads".
class CacheParamError : public Error {
 public:
  CacheParamError(std::string field, const std::string& message)
      : Error(KVC_ERR_INVALID_ARGUMENT, message), field_(std::move(field)) {}
  const std::string& field() const noexcept { return field_; }

 private:
  std::string field_;
};

// The configuration with its defaults applied (q_heads 0: as many as kv_heads), checked by
// validate_cache_config().
CacheConfig resolve_cache_config(CacheConfig config);

// Checks a resolved configuration's values; throws CacheParamError naming the field.
void validate_cache_config(const CacheConfig& config);

}  // namespace kvc
