// The defaults and checks of a cache's parameters, in one place for every entry point
// (kvc_cache_params from C, the YAML cache section), so they accept and refuse the same
// values with the same messages.
#pragma once

#include <cstdint>
#include <optional>
#include <string>

#include "config.hpp"

namespace kvc {

// A parameter that breaks its rule: its name (e.g. "q_heads") and the message.
struct CacheParamProblem {
  std::string field;
  std::string message;
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

// The configuration with its defaults applied (q_heads 0: as many as kv_heads).
CacheConfig with_cache_defaults(CacheConfig config);

// The first value of a configuration with its defaults applied that breaks its rule, if any.
std::optional<CacheParamProblem> find_cache_param_problem(const CacheConfig& config);

// Checks a configuration with its defaults applied; throws kvc::Error INVALID_ARGUMENT with
// the problem's message.
void validate_cache_config(const CacheConfig& config);

// with_cache_defaults(config), checked by validate_cache_config().
CacheConfig resolve_cache_config(CacheConfig config);

}  // namespace kvc
