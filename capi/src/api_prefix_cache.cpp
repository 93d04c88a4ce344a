// The prefix cache (kvcache.h, "prefix cache").
#include "checked_prefix.hpp"
#include "handles.hpp"

extern "C" {

kvc_status* kvc_prefix_attach(kvc_cache* cache, int32_t seq_id, const kvc_prefix* prefix,
                              int32_t* out_tokens_attached) {
  return kvc::guarded([&] {
    kvc::require(cache != nullptr, "cache is NULL");
    const kvc::PrefixRequest p = kvc::checked_prefix(prefix, false);
    kvc::require(out_tokens_attached != nullptr, "out_tokens_attached is NULL");
    *out_tokens_attached = cache->impl->attach_prefix(seq_id, p);
  });
}

kvc_status* kvc_prefix_publish(kvc_cache* cache, int32_t seq_id, const kvc_prefix* prefix,
                               int32_t* out_tokens_published) {
  return kvc::guarded([&] {
    kvc::require(cache != nullptr, "cache is NULL");
    const kvc::PrefixRequest p = kvc::checked_prefix(prefix, false);
    kvc::require(out_tokens_published != nullptr, "out_tokens_published is NULL");
    *out_tokens_published = cache->impl->publish_prefix(seq_id, p);
  });
}

kvc_status* kvc_prefix_lookup(kvc_cache* cache, const kvc_prefix* prefix, int32_t* out_tokens) {
  return kvc::guarded([&] {
    kvc::require(cache != nullptr, "cache is NULL");
    const kvc::PrefixRequest p = kvc::checked_prefix(prefix, false);
    kvc::require(out_tokens != nullptr, "out_tokens is NULL");
    *out_tokens = cache->impl->lookup_prefix(p);
  });
}

}  // extern "C"
