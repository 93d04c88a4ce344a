// The defaults and checks of a cache's parameters, in one place for every entry point
// (kvc_cache_params from C, the YAML cache section), so they accept and refuse the same
// values with the same messages.
#pragma once

#include <cstdint>
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

// The bounds of a cache's shape (kvcache.h, docs/config.md). Each (sequence, layer, KV head)
// has host bookkeeping outside the memory limit, so layers x kv_heads is bounded too; the
// growth factor's bounds keep the number of re-allocations of an array small.
constexpr int32_t kMaxLayers = 4096;
constexpr int32_t kMaxKvHeads = 4096;
constexpr int64_t kMaxLayerKvHeads = 65536;
constexpr int32_t kMaxQHeads = 16384;
constexpr int32_t kMaxHeadDim = 1024;
constexpr int32_t kMaxBlockTokens = 65536;
constexpr double kMinGrowthFactor = 1.01;
constexpr double kMaxGrowthFactor = 16.0;

// The configuration with its defaults applied (q_heads 0: as many as kv_heads), checked by
// validate_cache_config().
CacheConfig resolve_cache_config(CacheConfig config);

// Checks a resolved configuration's values; throws CacheParamError naming the field.
void validate_cache_config(const CacheConfig& config);

}  // namespace kvc
