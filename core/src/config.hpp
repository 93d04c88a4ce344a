// YAML configuration (docs/config.md): parsed into plain structs, validated on the way in.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "kvcache/kvcache.h"

namespace kvc {

// `prefix_cache:` (kvcache.h, "prefix cache").
struct PrefixCacheConfig {
  bool enabled = false;
  std::string store;  // continues lookups and takes write-through; empty: none
  bool write_through = false;

  bool operator==(const PrefixCacheConfig& other) const {
    return enabled == other.enabled && store == other.store && write_through == other.write_through;
  }
};

struct CacheConfig {
  int32_t layers = 1;
  int32_t kv_heads = 1;
  int32_t q_heads = 0;  // 0: as many as kv_heads (resolve_cache_config)
  int32_t head_dim = 64;
  kvc_dtype k_dtype = KVC_DTYPE_F16;  // storage formats (kvcache_format.h); YAML `dtype` sets both
  kvc_dtype v_dtype = KVC_DTYPE_F16;
  kvc_rotation k_rotation = KVC_ROTATION_NONE;  // applied to K by the backend (kvcache_rotation.h)
  kvc_layout layout = KVC_LAYOUT_PAGED;
  int32_t block_tokens = 16;
  double growth_factor = 2.0;
  size_t memory_limit = size_t{1} << 30;
  std::string backend = "cpu";
  int32_t backend_device = -1;  // `backend.device`; -1: the backend's choice
  std::vector<std::pair<std::string, std::string>> backend_params;  // scalar values as written
  PrefixCacheConfig prefix_cache;
};

enum class PrefillCompression { none, per_chunk, once };

// `policy.demote:` (docs/policies.md, "Demote before evict"): tokens the budget cannot keep
// in the cache's formats are stored in these smaller ones before any is evicted.
struct DemoteConfig {
  bool enabled = false;
  std::optional<kvc_dtype> k_dtype;  // absent: K keeps the cache's format
  std::optional<kvc_dtype> v_dtype;  // absent: V keeps the cache's format
  // The share of each head's byte budget that tokens in the cache's formats may take (the
  // protected ones first, then the highest scored); the rest buys demoted tokens.
  double keep = 0.25;
};

struct PolicyConfig {
  std::string name = "full";
  int32_t budget_tokens = 0;   // used when budget_ratio == 0
  double budget_ratio = 0.0;   // in (0, 1] when the budget is a ratio
  int32_t sinks = -1;          // < 0: the policy's default
  int32_t recent = -1;         // < 0: the policy's default
  std::vector<std::pair<std::string, std::string>> params;  // scalar values as written
  PrefillCompression prefill = PrefillCompression::none;
  int32_t decode_every = 0;    // 0: never by step count
  int32_t decode_slack = 0;    // > 0: compress when a sequence exceeds budget + slack
  DemoteConfig demote;
};

// One entry of `stores:`: the name calls use, the store plugin and its parameters.
struct StoreConfig {
  std::string name;
  std::string plugin;
  std::vector<std::pair<std::string, std::string>> params;  // scalar values as written

  bool operator==(const StoreConfig& other) const {
    return name == other.name && plugin == other.plugin && params == other.params;
  }
};

struct Config {
  std::optional<int32_t> threads;  // absent or 0: all cores
  std::vector<std::string> plugin_paths;
  CacheConfig cache;
  std::optional<PolicyConfig> policy;
  std::optional<std::vector<StoreConfig>> stores;  // in the document's order; absent: none
};

// Parses a whole configuration document. Empty text gives the defaults. Errors are
// kvc::Error with KVC_ERR_CONFIG and a message "<source>:<line>: <key path>: <problem>",
// e.g. "config.yaml:7: cache.head_dim: must be a positive integer, got 'abc'".
Config parse_config(const std::string& yaml_text, const std::string& source_name);

// Parses "2GiB", "512MiB", "64KiB", "1GB", "1000" (bytes) into bytes; throws std::invalid_argument.
size_t parse_byte_size(const std::string& text);

}  // namespace kvc
