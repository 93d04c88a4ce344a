#include <functional>

#include "handles.hpp"

namespace {

kvc_cache_params params_from(const kvc::CacheConfig& c) {
  kvc_cache_params p{};
  p.struct_size = sizeof(p);
  p.layers = c.layers;
  p.kv_heads = c.kv_heads;
  p.q_heads = c.q_heads;
  p.head_dim = c.head_dim;
  p.dtype = c.dtype;
  p.layout = c.layout;
  p.block_tokens = c.block_tokens;
  p.growth_factor = c.growth_factor;
  p.memory_limit = c.memory_limit;
  p.backend = nullptr;
  return p;
}

kvc::CacheConfig config_from(const kvc_cache_params& p) {
  kvc::CacheConfig c;
  c.layers = p.layers;
  c.kv_heads = p.kv_heads;
  c.q_heads = p.q_heads;
  c.head_dim = p.head_dim;
  c.dtype = p.dtype;
  c.layout = p.layout;
  c.block_tokens = p.block_tokens;
  c.growth_factor = p.growth_factor;
  c.memory_limit = p.memory_limit;
  if (p.backend) c.backend = p.backend;
  return c;
}

kvc_status* create_cache(kvc_context* context, const std::function<kvc::CacheConfig()>& config,
                         kvc_cache** out_cache) {
  return kvc::guarded([&] {
    kvc::require(context != nullptr, "context is NULL");
    kvc::require(out_cache != nullptr, "out_cache is NULL");
    auto cache = std::make_unique<kvc_cache>();
    cache->impl = std::make_unique<kvc::Cache>(*context->impl, config());
    *out_cache = cache.release();
  });
}

}  // namespace

extern "C" {

void kvc_cache_params_init(kvc_cache_params* params) {
  if (params) *params = params_from(kvc::CacheConfig{});
}

kvc_status* kvc_cache_create(kvc_context* context, const kvc_cache_params* params,
                             kvc_cache** out_cache) {
  return create_cache(context, [&] {
    kvc_cache_params defaults{};
    kvc_cache_params_init(&defaults);
    return config_from(kvc::read_versioned(params, defaults, "params is NULL"));
  }, out_cache);
}

kvc_status* kvc_cache_create_from_yaml(kvc_context* context, const char* yaml_text,
                                       kvc_cache** out_cache) {
  return create_cache(context, [&] {
    if (!yaml_text) return context->impl->config().cache;
    return kvc::parse_config(yaml_text, "<cache yaml>").cache;
  }, out_cache);
}

void kvc_cache_destroy(kvc_cache* cache) { delete cache; }

kvc_status* kvc_cache_get_params(const kvc_cache* cache, kvc_cache_params* out_params) {
  return kvc::guarded([&] {
    kvc::require(cache != nullptr, "cache is NULL");
    kvc_cache_params params = params_from(cache->impl->config());
    params.backend = cache->impl->config().backend.c_str();
    kvc::write_versioned(out_params, params);
  });
}

kvc_status* kvc_cache_get_stats(const kvc_cache* cache, kvc_cache_stats* out_stats) {
  return kvc::guarded([&] {
    kvc::require(cache != nullptr, "cache is NULL");
    kvc::write_versioned(out_stats, cache->impl->stats());
  });
}

kvc_status* kvc_seq_create(kvc_cache* cache, int32_t seq_id) {
  return kvc::guarded([&] {
    kvc::require(cache != nullptr, "cache is NULL");
    cache->impl->create_sequence(seq_id);
  });
}

kvc_status* kvc_seq_remove(kvc_cache* cache, int32_t seq_id) {
  return kvc::guarded([&] {
    kvc::require(cache != nullptr, "cache is NULL");
    cache->impl->remove_sequence(seq_id);
  });
}

kvc_status* kvc_seq_reserve(kvc_cache* cache, int32_t seq_id, int32_t tokens) {
  return kvc::guarded([&] {
    kvc::require(cache != nullptr, "cache is NULL");
    cache->impl->reserve(seq_id, tokens);
  });
}

kvc_status* kvc_seq_length(const kvc_cache* cache, int32_t seq_id, int32_t layer,
                           int32_t kv_head, int32_t* out_length) {
  return kvc::guarded([&] {
    kvc::require(cache != nullptr, "cache is NULL");
    kvc::require(out_length != nullptr, "out_length is NULL");
    *out_length = cache->impl->length(seq_id, layer, kv_head);
  });
}

}  // extern "C"
