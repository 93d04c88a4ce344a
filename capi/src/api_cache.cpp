#include <cstddef>
#include <functional>
#include <optional>

#include "cache_params.hpp"
#include "handles.hpp"
#include "kvcache/kvcache_format.h"
#include "kvcache/kvcache_rotation.h"
#include "versioned_init.hpp"

namespace {

kvc_cache_params params_from(const kvc::CacheConfig& c) {
  kvc_cache_params p{};
  p.struct_size = sizeof(p);
  p.layers = c.layers;
  p.kv_heads = c.kv_heads;
  p.q_heads = c.q_heads;
  p.head_dim = c.head_dim;
  p.dtype = c.k_dtype;
  p.k_dtype = c.k_dtype == c.v_dtype ? -1 : c.k_dtype;
  p.v_dtype = c.k_dtype == c.v_dtype ? -1 : c.v_dtype;
  p.k_rotation = c.k_rotation;
  p.prefix_cache = c.prefix_cache.enabled ? 1 : 0;
  p.prefix_write_through = c.prefix_cache.write_through ? 1 : 0;
  p.layout = c.layout;
  p.block_tokens = c.block_tokens;
  p.growth_factor = c.growth_factor;
  p.memory_limit = c.memory_limit;
  p.backend = nullptr;
  p.policy = nullptr;
  p.sinks = -1;
  p.recent = -1;
  p.demote_keep = kvc::DemoteConfig{}.keep;
  p.demote_k_dtype = -1;
  p.demote_v_dtype = -1;
  return p;
}

kvc::CacheConfig config_from(const kvc_cache_params& p) {
  kvc::require(kvc_format_is_valid(kvc::raw_enum(p.dtype)), "dtype is not a kvc_dtype");
  kvc::require(p.k_dtype == -1 || kvc_format_is_valid(p.k_dtype),
               "k_dtype is neither -1 nor a kvc_dtype");
  kvc::require(p.v_dtype == -1 || kvc_format_is_valid(p.v_dtype),
               "v_dtype is neither -1 nor a kvc_dtype");
  kvc::require_enum(p.layout, KVC_LAYOUT_PAGED, KVC_LAYOUT_CONTIGUOUS, "layout is not a kvc_layout");
  kvc::require(kvc_rotation_is_valid(p.k_rotation), "k_rotation is not a kvc_rotation");
  kvc::CacheConfig c;
  c.layers = p.layers;
  c.kv_heads = p.kv_heads;
  c.q_heads = p.q_heads;
  c.head_dim = p.head_dim;
  c.k_dtype = p.k_dtype == -1 ? p.dtype : static_cast<kvc_dtype>(p.k_dtype);
  c.v_dtype = p.v_dtype == -1 ? p.dtype : static_cast<kvc_dtype>(p.v_dtype);
  c.k_rotation = static_cast<kvc_rotation>(p.k_rotation);
  c.prefix_cache.enabled = p.prefix_cache != 0;
  if (p.prefix_store) c.prefix_cache.store = p.prefix_store;
  c.prefix_cache.write_through = p.prefix_write_through != 0;
  c.layout = p.layout;
  c.block_tokens = p.block_tokens;
  c.growth_factor = p.growth_factor;
  c.memory_limit = p.memory_limit;
  if (p.backend) c.backend = p.backend;
  return kvc::resolve_cache_config(c);
}

std::optional<kvc::PolicyConfig> policy_from(const kvc_cache_params& p) {
  if (!p.policy) {
    kvc::require(p.demote_k_dtype == -1 && p.demote_v_dtype == -1,
                 "demote_k_dtype and demote_v_dtype need a policy: only compression demotes");
    return std::nullopt;
  }
  kvc::PolicyConfig policy;
  policy.name = p.policy;
  kvc::require(p.budget >= 0, "budget must be >= 0");
  kvc::require(p.budget_ratio >= 0.0 && p.budget_ratio <= 1.0, "budget_ratio must be in [0, 1]");
  policy.budget_tokens = p.budget;
  policy.budget_ratio = p.budget > 0 ? 0.0 : p.budget_ratio;
  policy.sinks = p.sinks;
  policy.recent = p.recent;
  kvc::require(p.n_policy_params == 0 || p.policy_params, "policy_params is NULL");
  for (size_t i = 0; i < p.n_policy_params; ++i) {
    const kvc_key_value& kv = p.policy_params[i];
    if (!kv.key || !kv.value) {
      throw kvc::Error(KVC_ERR_INVALID_ARGUMENT, "policy_params[" + std::to_string(i) +
                                                     "] has a NULL " + (kv.key ? "value" : "key"));
    }
    policy.params.emplace_back(kv.key, kv.value);
  }
  kvc::require_enum(p.prefill, KVC_PREFILL_NONE, KVC_PREFILL_ONCE,
                    "prefill is not a kvc_prefill_compression");
  policy.prefill = p.prefill == KVC_PREFILL_PER_CHUNK ? kvc::PrefillCompression::per_chunk
                   : p.prefill == KVC_PREFILL_ONCE    ? kvc::PrefillCompression::once
                                                      : kvc::PrefillCompression::none;
  kvc::require(p.decode_every >= 0 && p.decode_slack >= 0,
               "decode_every and decode_slack must be >= 0");
  policy.decode_every = p.decode_every;
  policy.decode_slack = p.decode_slack;
  kvc::require(p.demote_k_dtype == -1 || kvc_format_is_valid(p.demote_k_dtype),
               "demote_k_dtype is neither -1 nor a kvc_dtype");
  kvc::require(p.demote_v_dtype == -1 || kvc_format_is_valid(p.demote_v_dtype),
               "demote_v_dtype is neither -1 nor a kvc_dtype");
  kvc::require(p.demote_keep >= 0.0 && p.demote_keep <= 1.0, "demote_keep must be in [0, 1]");
  kvc::DemoteConfig& demote = policy.demote;
  demote.enabled = p.demote_k_dtype != -1 || p.demote_v_dtype != -1;
  if (p.demote_k_dtype != -1) demote.k_dtype = static_cast<kvc_dtype>(p.demote_k_dtype);
  if (p.demote_v_dtype != -1) demote.v_dtype = static_cast<kvc_dtype>(p.demote_v_dtype);
  demote.keep = p.demote_keep;
  return policy;
}

using CacheSetup = std::pair<kvc::CacheConfig, std::optional<kvc::PolicyConfig>>;

kvc_status* create_cache(kvc_context* context, const std::function<CacheSetup()>& setup,
                         kvc_cache** out_cache) {
  return kvc::guarded([&] {
    kvc::require(context != nullptr, "context is NULL");
    kvc::require(out_cache != nullptr, "out_cache is NULL");
    auto [config, policy] = setup();
    auto cache = std::make_unique<kvc_cache>();
    cache->impl = std::make_unique<kvc::Cache>(*context->impl, config, policy);
    *out_cache = cache.release();
  });
}

}  // namespace

extern "C" {

void kvc_cache_params_init_sized(kvc_cache_params* params, size_t struct_size) {
  kvc::init_versioned(params, struct_size, params_from(kvc::CacheConfig{}));
}

kvc_status* kvc_cache_create(kvc_context* context, const kvc_cache_params* params,
                             kvc_cache** out_cache) {
  return create_cache(context, [&] {
    kvc_cache_params defaults{};
    kvc_cache_params_init(&defaults);
    kvc_cache_params p = kvc::read_versioned(params, defaults, "params");
    // k_dtype lies in the tail padding of the struct before it had k_dtype and v_dtype: a
    // caller whose struct_size does not cover v_dtype is an older one, and has neither.
    if (params->struct_size < offsetof(kvc_cache_params, v_dtype) + sizeof(p.v_dtype)) {
      p.k_dtype = p.v_dtype = -1;
    }
    if (params->struct_size < offsetof(kvc_cache_params, k_rotation) + sizeof(p.k_rotation)) {
      p.k_rotation = KVC_ROTATION_NONE;
    }
    return CacheSetup{config_from(p), policy_from(p)};
  }, out_cache);
}

kvc_status* kvc_cache_create_from_yaml(kvc_context* context, const char* yaml_text,
                                       kvc_cache** out_cache) {
  return create_cache(context, [&] {
    if (!yaml_text) return CacheSetup{context->impl->config().cache, context->impl->config().policy};
    kvc::Config config = kvc::parse_config(yaml_text, "<cache yaml>");
    context->impl->check_cache_config(config);
    return CacheSetup{config.cache, config.policy};
  }, out_cache);
}

void kvc_cache_destroy(kvc_cache* cache) {
  // Teardown frees on the backend's default stream: the engine's may be gone already.
  if (cache) cache->impl->set_stream(nullptr);
  delete cache;
}

kvc_status* kvc_cache_set_stream(kvc_cache* cache, void* stream) {
  return kvc::guarded([&] {
    kvc::require(cache != nullptr, "cache is NULL");
    cache->impl->set_stream(stream);
  });
}

kvc_status* kvc_cache_get_params(const kvc_cache* cache, kvc_cache_params* out_params) {
  return kvc::guarded([&] {
    kvc::require(cache != nullptr, "cache is NULL");
    kvc_cache_params params = params_from(cache->impl->config());
    params.backend = cache->impl->config().backend.c_str();
    params.k_dtype = cache->impl->config().k_dtype;
    params.v_dtype = cache->impl->config().v_dtype;
    const std::string& prefix_store = cache->impl->config().prefix_cache.store;
    params.prefix_store = prefix_store.empty() ? nullptr : prefix_store.c_str();
    if (const kvc::Policy* policy = cache->impl->policy()) {
      const kvc::PolicyConfig& p = policy->config();
      params.policy = p.name.c_str();
      params.budget = p.budget_tokens;
      params.budget_ratio = p.budget_ratio;
      params.sinks = p.sinks;
      params.recent = p.recent;
      params.prefill = p.prefill == kvc::PrefillCompression::per_chunk ? KVC_PREFILL_PER_CHUNK
                       : p.prefill == kvc::PrefillCompression::once    ? KVC_PREFILL_ONCE
                                                                       : KVC_PREFILL_NONE;
      params.decode_every = p.decode_every;
      params.decode_slack = p.decode_slack;
      if (p.demote.enabled) {
        params.demote_k_dtype = p.demote.k_dtype ? *p.demote.k_dtype : -1;
        params.demote_v_dtype = p.demote.v_dtype ? *p.demote.v_dtype : -1;
        params.demote_keep = p.demote.keep;
      }
    }
    kvc::write_versioned(out_params, params, "out_params");
  });
}

kvc_status* kvc_seq_view(const kvc_cache* cache, int32_t seq_id, int32_t layer, int32_t kv_head,
                         kvc_segment_view* out_views, size_t capacity, size_t* out_count) {
  return kvc::guarded([&] {
    kvc::require(cache != nullptr, "cache is NULL");
    kvc::require(out_count != nullptr, "out_count is NULL");
    kvc::require(capacity == 0 || out_views != nullptr, "out_views is NULL");
    std::vector<kvc_segment> segments = cache->impl->view(seq_id, layer, kv_head);
    for (size_t i = 0; i < segments.size() && i < capacity; ++i) {
      out_views[i] = kvc_segment_view{segments[i].k, segments[i].v, segments[i].pos, segments[i].count};
    }
    *out_count = segments.size();
  });
}

void kvc_cache_stats_init_sized(kvc_cache_stats* stats, size_t struct_size) {
  kvc::init_versioned(stats, struct_size, kvc_cache_stats{});
}

void kvc_policy_info_init_sized(kvc_policy_info* info, size_t struct_size) {
  kvc::init_versioned(info, struct_size, kvc_policy_info{});
}

kvc_status* kvc_cache_policy_info(const kvc_cache* cache, kvc_policy_info* out_info) {
  return kvc::guarded([&] {
    kvc::require(cache != nullptr, "cache is NULL");
    kvc::require(out_info != nullptr, "out_info is NULL");
    kvc::require(out_info->struct_size != 0, "out_info->struct_size is 0: call kvc_policy_info_init()");
    const kvc::Policy* policy = cache->impl->policy();
    if (!policy) throw kvc::Error(KVC_ERR_NOT_FOUND, "the cache was created without a policy");
    const kvc::PolicyConfig& config = policy->config();
    kvc_policy_info info{};
    info.struct_size = sizeof(info);
    info.name = config.name.c_str();
    info.sinks = config.sinks;
    info.recent = config.recent;
    info.budget_tokens = config.budget_tokens;
    info.budget_ratio = config.budget_ratio;
    info.stats = policy->stats();
    info.observation_window = policy->observation_window();
    kvc::write_versioned(out_info, info, "out_info");
  });
}

kvc_status* kvc_cache_get_stats(const kvc_cache* cache, kvc_cache_stats* out_stats) {
  return kvc::guarded([&] {
    kvc::require(cache != nullptr, "cache is NULL");
    kvc::write_versioned(out_stats, cache->impl->stats(), "out_stats");
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

kvc_status* kvc_seq_fork(kvc_cache* cache, int32_t src_seq_id, int32_t dst_seq_id) {
  return kvc::guarded([&] {
    kvc::require(cache != nullptr, "cache is NULL");
    cache->impl->fork_sequence(src_seq_id, dst_seq_id);
  });
}

kvc_status* kvc_seq_truncate(kvc_cache* cache, int32_t seq_id, int32_t position) {
  return kvc::guarded([&] {
    kvc::require(cache != nullptr, "cache is NULL");
    kvc::require(position >= 0, "truncate: position must be >= 0");
    cache->impl->remove_positions(seq_id, position, INT32_MAX);
  });
}

kvc_status* kvc_seq_remove_range(kvc_cache* cache, int32_t seq_id, int32_t first, int32_t end) {
  return kvc::guarded([&] {
    kvc::require(cache != nullptr, "cache is NULL");
    kvc::require(first >= 0 && first <= end, "remove_range: need 0 <= first <= end");
    cache->impl->remove_positions(seq_id, first, end);
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

kvc_status* kvc_compress(kvc_cache* cache, int32_t layer, int32_t n_seqs, const int32_t* seq_ids) {
  return kvc::guarded([&] {
    kvc::require(cache != nullptr, "cache is NULL");
    kvc::require(n_seqs >= 0, "n_seqs must be >= 0");
    kvc::require(n_seqs == 0 || seq_ids != nullptr, "seq_ids is NULL");
    cache->impl->compress(std::vector<int32_t>(seq_ids, seq_ids + n_seqs), layer);
  });
}

kvc_status* kvc_report_stats(kvc_cache* cache, int32_t seq_id, int32_t layer, int32_t kv_head,
                             kvc_stat_kind kind, const float* values, int32_t n_values) {
  return kvc::guarded([&] {
    kvc::require(cache != nullptr, "cache is NULL");
    int32_t raw_kind = kvc::raw_enum(kind);
    kvc::require(raw_kind == KVC_STAT_KIND_ATTN_SUM || raw_kind == KVC_STAT_KIND_ATTN_LAST ||
                     raw_kind == KVC_STAT_KIND_ATTN_WINDOW,
                 "kind is not a kvc_stat_kind");
    cache->impl->report_stats(seq_id, layer, kv_head, static_cast<kvc_stat_flags>(kind), values,
                              n_values);
  });
}

kvc_status* kvc_cache_estimate_peak_bytes(const kvc_cache* cache, int32_t prompt_tokens,
                                          int32_t chunk_tokens, int32_t new_tokens,
                                          size_t* out_bytes) {
  return kvc::guarded([&] {
    kvc::require(cache != nullptr, "cache is NULL");
    kvc::require(out_bytes != nullptr, "out_bytes is NULL");
    *out_bytes = cache->impl->estimate_peak_bytes(prompt_tokens, chunk_tokens, new_tokens, false);
  });
}

void kvc_estimate_request_init_sized(kvc_estimate_request* request, size_t struct_size,
                                     int32_t prompt_tokens, int32_t chunk_tokens,
                                     int32_t new_tokens) {
  kvc_estimate_request r{};
  r.prompt_tokens = prompt_tokens;
  r.chunk_tokens = chunk_tokens;
  r.new_tokens = new_tokens;
  kvc::init_versioned(request, struct_size, r);
}

kvc_status* kvc_cache_estimate(const kvc_cache* cache, const kvc_estimate_request* request,
                               size_t* out_bytes) {
  return kvc::guarded([&] {
    kvc::require(cache != nullptr, "cache is NULL");
    kvc::require(out_bytes != nullptr, "out_bytes is NULL");
    const kvc_estimate_request r = kvc::read_versioned(request, kvc_estimate_request{}, "request");
    *out_bytes = cache->impl->estimate_peak_bytes(r.prompt_tokens, r.chunk_tokens, r.new_tokens,
                                                  r.marks_prompt_end != 0);
  });
}

}  // extern "C"
