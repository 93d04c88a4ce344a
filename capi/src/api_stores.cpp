// Stores: offload and restore of one sequence, and a prompt prefix's K/V saved and loaded in
// chunks (docs/stores.md).
#include <cstring>
#include <string>

#include "checked_prefix.hpp"
#include "handles.hpp"
#include "offload.hpp"
#include "prefix_transfer.hpp"
#include "versioned_init.hpp"

namespace {

constexpr size_t kMaxKeyBytes = 1024;

// Every argument is checked before the store is looked up or asked anything.
void require_store_name(const char* store) {
  kvc::require(store != nullptr && *store != '\0', "store is NULL or empty");
}

std::string checked_key(const char* key) {
  kvc::require(key != nullptr, "key is NULL");
  const size_t length = strnlen(key, kMaxKeyBytes + 1);
  kvc::require(length > 0, "key is empty");
  kvc::require(length <= kMaxKeyBytes, "key is longer than 1024 bytes");
  return std::string(key, length);
}

}  // namespace

extern "C" {

kvc_status* kvc_seq_offload(kvc_cache* cache, int32_t seq_id, const char* store,
                            const char* key) {
  return kvc::guarded([&] {
    kvc::require(cache != nullptr, "cache is NULL");
    require_store_name(store);
    const std::string checked = checked_key(key);
    kvc::offload_sequence(*cache->impl, seq_id, store, checked);
  });
}

kvc_status* kvc_seq_restore(kvc_cache* cache, int32_t seq_id, const char* store,
                            const char* key) {
  return kvc::guarded([&] {
    kvc::require(cache != nullptr, "cache is NULL");
    require_store_name(store);
    const std::string checked = checked_key(key);
    kvc::restore_sequence(*cache->impl, seq_id, store, checked);
  });
}

kvc_status* kvc_store_drop(kvc_context* context, const char* store, const char* key) {
  return kvc::guarded([&] {
    kvc::require(context != nullptr, "context is NULL");
    require_store_name(store);
    const std::string checked = checked_key(key);
    context->impl->store(store).remove(checked);
  });
}

void kvc_prefix_init_sized(kvc_prefix* prefix, size_t struct_size, const char* model,
                           const int32_t* token_ids, int32_t n_tokens) {
  kvc_prefix p{};
  p.model = model;
  p.token_ids = token_ids;
  p.n_tokens = n_tokens;
  p.chunk_tokens = kvc::kDefaultChunkTokens;
  kvc::init_versioned(prefix, struct_size, p);
}

kvc_status* kvc_prefix_save(kvc_cache* cache, int32_t seq_id, const char* store,
                            const kvc_prefix* prefix, int32_t* out_tokens_saved) {
  return kvc::guarded([&] {
    kvc::require(cache != nullptr, "cache is NULL");
    require_store_name(store);
    const kvc::PrefixRequest p = kvc::checked_prefix(prefix, true);
    kvc::require(out_tokens_saved != nullptr, "out_tokens_saved is NULL");
    *out_tokens_saved = kvc::save_prefix(*cache->impl, seq_id, store, p);
  });
}

kvc_status* kvc_prefix_load(kvc_cache* cache, int32_t seq_id, const char* store,
                            const kvc_prefix* prefix, int32_t* out_tokens_restored) {
  return kvc::guarded([&] {
    kvc::require(cache != nullptr, "cache is NULL");
    require_store_name(store);
    const kvc::PrefixRequest p = kvc::checked_prefix(prefix, true);
    kvc::require(out_tokens_restored != nullptr, "out_tokens_restored is NULL");
    *out_tokens_restored = kvc::load_prefix(*cache->impl, seq_id, store, p);
  });
}

}  // extern "C"
