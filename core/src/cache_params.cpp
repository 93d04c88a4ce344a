#include "cache_params.hpp"

#include <cmath>
#include <cstdint>
#include <sstream>

#include "kvcache/kvcache_error.hpp"
#include "kvcache/kvcache_format.h"

namespace kvc {
namespace {

CacheParamProblem refuse(const char* field, const std::string& rule) {
  return CacheParamProblem{field, std::string(field) + " must be " + rule};
}

std::optional<CacheParamProblem> require_in(const char* field, int32_t value, int32_t min,
                                            int32_t max) {
  if (value >= min && value <= max) return std::nullopt;
  return refuse(field, "in " + std::to_string(min) + ".." + std::to_string(max) + ", got " +
                           std::to_string(value));
}

std::string format_number(double value) {
  std::ostringstream text;
  text << value;
  return text.str();
}

}  // namespace

CacheConfig with_cache_defaults(CacheConfig config) {
  if (config.q_heads == 0) config.q_heads = config.kv_heads;
  return config;
}

std::optional<CacheParamProblem> find_cache_param_problem(const CacheConfig& c) {
  if (auto problem = require_in("layers", c.layers, 1, kMaxLayers)) return problem;
  if (auto problem = require_in("kv_heads", c.kv_heads, 1, kMaxKvHeads)) return problem;
  if (int64_t{c.layers} * c.kv_heads > kMaxLayerKvHeads) {
    const int64_t most = kMaxLayerKvHeads / c.layers;
    return refuse("kv_heads", "at most " + std::to_string(most) + " for " +
                                  std::to_string(c.layers) + " layers (layers x kv_heads at most " +
                                  std::to_string(kMaxLayerKvHeads) + "), got " +
                                  std::to_string(c.kv_heads));
  }
  if (c.q_heads < 1 || c.q_heads % c.kv_heads != 0) {
    return refuse("q_heads", "a positive multiple of kv_heads (" + std::to_string(c.kv_heads) +
                                 "), got " + std::to_string(c.q_heads));
  }
  if (auto problem = require_in("q_heads", c.q_heads, 1, kMaxQHeads)) return problem;
  if (auto problem = require_in("head_dim", c.head_dim, 1, kMaxHeadDim)) return problem;
  for (kvc_dtype format : {c.k_dtype, c.v_dtype}) {
    if (kvc_format_row_bytes(format, static_cast<size_t>(c.head_dim)) == 0) {
      return refuse("head_dim", std::string("a multiple of ") + kvc_format_name(format) +
                                    "'s group size " +
                                    std::to_string(kvc_format_group_size(format)) + ", got " +
                                    std::to_string(c.head_dim));
    }
  }
  if (auto problem = require_in("block_tokens", c.block_tokens, 1, kMaxBlockTokens)) {
    return problem;
  }
  if (!(c.growth_factor >= kMinGrowthFactor && c.growth_factor <= kMaxGrowthFactor)) {
    return refuse("growth_factor", "in " + format_number(kMinGrowthFactor) + ".." +
                                       format_number(kMaxGrowthFactor) + ", got " +
                                       format_number(c.growth_factor));
  }
  if (c.memory_limit == 0) return refuse("memory_limit", "> 0");
  const PrefixCacheConfig& prefix = c.prefix_cache;
  if (prefix.enabled && c.layout != KVC_LAYOUT_PAGED) {
    return CacheParamProblem{"prefix_cache",
                             "prefix_cache needs the paged layout: its unit is the block"};
  }
  if (!prefix.enabled && (!prefix.store.empty() || prefix.write_through)) {
    return CacheParamProblem{"prefix_cache",
                             "prefix_cache: a store or write_through needs prefix caching enabled"};
  }
  if (prefix.write_through && prefix.store.empty()) {
    return CacheParamProblem{"prefix_cache", "prefix_cache: write_through needs a store"};
  }
  return std::nullopt;
}

void validate_cache_config(const CacheConfig& config) {
  if (auto problem = find_cache_param_problem(config)) {
    throw Error(KVC_ERR_INVALID_ARGUMENT, problem->message);
  }
}

CacheConfig resolve_cache_config(CacheConfig config) {
  config = with_cache_defaults(config);
  validate_cache_config(config);
  return config;
}

}  // namespace kvc
