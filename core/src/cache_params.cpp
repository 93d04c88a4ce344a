#include "cache_params.hpp"

#include <cmath>
#include <cstdint>
#include <sstream>

#include "kvcache/kvcache_format.h"

namespace kvc {
namespace {

[[noreturn]] void refuse(const char* field, const std::string& rule) {
  throw CacheParamError(field, std::string(field) + " must be " + rule);
}

void require_in(const char* field, int32_t value, int32_t min, int32_t max) {
  if (value < min || value > max) {
    refuse(field, "in " + std::to_string(min) + ".." + std::to_string(max) + ", got " +
                      std::to_string(value));
  }
}

std::string format_number(double value) {
  std::ostringstream text;
  text << value;
  return text.str();
}

}  // namespace

CacheConfig resolve_cache_config(CacheConfig config) {
  if (config.q_heads == 0) config.q_heads = config.kv_heads;
  validate_cache_config(config);
  return config;
}

void validate_cache_config(const CacheConfig& c) {
  require_in("layers", c.layers, 1, kMaxLayers);
  require_in("kv_heads", c.kv_heads, 1, kMaxKvHeads);
  if (int64_t{c.layers} * c.kv_heads > kMaxLayerKvHeads) {
    const int64_t most = kMaxLayerKvHeads / c.layers;
    refuse("kv_heads", "at most " + std::to_string(most) + " for " + std::to_string(c.layers) +
                           " layers (layers x kv_heads at most " +
                           std::to_string(kMaxLayerKvHeads) + "), got " +
                           std::to_string(c.kv_heads));
  }
  if (c.q_heads < 1 || c.q_heads % c.kv_heads != 0) {
    refuse("q_heads", "a positive multiple of kv_heads (" + std::to_string(c.kv_heads) +
                          "), got " + std::to_string(c.q_heads));
  }
  require_in("q_heads", c.q_heads, 1, kMaxQHeads);
  require_in("head_dim", c.head_dim, 1, kMaxHeadDim);
  for (kvc_dtype format : {c.k_dtype, c.v_dtype}) {
    if (kvc_format_row_bytes(format, static_cast<size_t>(c.head_dim)) == 0) {
      refuse("head_dim", std::string("a multiple of ") + kvc_format_name(format) +
                             "'s group size " + std::to_string(kvc_format_group_size(format)) +
                             ", got " + std::to_string(c.head_dim));
    }
  }
  require_in("block_tokens", c.block_tokens, 1, kMaxBlockTokens);
  if (!(c.growth_factor >= kMinGrowthFactor && c.growth_factor <= kMaxGrowthFactor)) {
    refuse("growth_factor", "in " + format_number(kMinGrowthFactor) + ".." +
                                format_number(kMaxGrowthFactor) + ", got " +
                                format_number(c.growth_factor));
  }
  if (c.memory_limit == 0) refuse("memory_limit", "> 0");
}

}  // namespace kvc
