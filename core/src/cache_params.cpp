#include "cache_params.hpp"

#include <cmath>
#include <cstdint>

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

void require_positive(const char* field, int32_t value) {
  if (value < 1) refuse(field, ">= 1, got " + std::to_string(value));
}

}  // namespace

CacheConfig resolve_cache_config(CacheConfig config) {
  if (config.q_heads == 0) config.q_heads = config.kv_heads;
  validate_cache_config(config);
  return config;
}

void validate_cache_config(const CacheConfig& c) {
  require_positive("layers", c.layers);
  require_positive("kv_heads", c.kv_heads);
  if (c.q_heads < 1 || c.q_heads % c.kv_heads != 0) {
    refuse("q_heads", "a positive multiple of kv_heads (" + std::to_string(c.kv_heads) +
                          "), got " + std::to_string(c.q_heads));
  }
  require_in("head_dim", c.head_dim, 1, 1024);
  require_in("block_tokens", c.block_tokens, 1, 65536);
  if (!(c.growth_factor > 1.0) || !std::isfinite(c.growth_factor)) {
    refuse("growth_factor", "> 1, got " + std::to_string(c.growth_factor));
  }
  if (c.memory_limit == 0) refuse("memory_limit", "> 0");
}

}  // namespace kvc
