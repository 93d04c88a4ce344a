// Stores: offload and restore of one sequence, and a prompt prefix's K/V saved and loaded in
// chunks (docs/stores.md).
#include <cstring>
#include <string>
#include <vector>

#include "handles.hpp"
#include "versioned_init.hpp"
#include "prefix_chunks.hpp"
#include "prefix_keys.hpp"
#include "quote.hpp"
#include "sequence_image.hpp"

namespace {

constexpr size_t kMaxKeyBytes = 1024;
constexpr int32_t kDefaultChunkTokens = 256;
constexpr int32_t kMaxChunkTokens = 65536;

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

// A value read back from a store as a sequence image, its rows left in `bytes`: one that does
// not decode is a damaged value (IO); a newer format keeps its UNSUPPORTED.
kvc::SequenceImage decode_value(const kvc::StoredValue& bytes, const kvc::Store& store,
                                const std::string& key) {
  try {
    return kvc::decode(bytes.data(), bytes.size(), kvc::DecodedRows::in_place);
  } catch (const kvc::Error& e) {
    const kvc_status_code code = e.code() == KVC_ERR_UNSUPPORTED ? e.code() : KVC_ERR_IO;
    throw kvc::Error(code, "store " + kvc::quote(store.name()) + ": the value under " +
                               kvc::quote(key) + ": " + e.what());
  }
}

kvc_prefix checked_prefix(const kvc_prefix* in) {
  kvc_prefix defaults{};
  defaults.chunk_tokens = kDefaultChunkTokens;
  const kvc_prefix prefix = kvc::read_versioned(in, defaults, "prefix");
  kvc::require(prefix.model != nullptr && *prefix.model != '\0', "prefix->model is NULL or empty");
  kvc::require(prefix.n_tokens >= 0, "prefix->n_tokens is negative");
  kvc::require(prefix.token_ids != nullptr || prefix.n_tokens == 0,
               "prefix->token_ids is NULL and prefix->n_tokens > 0");
  kvc::require(prefix.chunk_tokens >= 1 && prefix.chunk_tokens <= kMaxChunkTokens,
               "prefix->chunk_tokens is outside 1..65536");
  return prefix;
}

kvc::PrefixIdentity identity_of(const kvc::Cache& cache, const kvc_prefix& prefix) {
  const kvc::CacheConfig& c = cache.config();
  return {prefix.model, c.layers, c.kv_heads, c.q_heads, c.head_dim, c.k_dtype, c.v_dtype,
          cache.stored_stats(), prefix.chunk_tokens};
}

}  // namespace

extern "C" {

kvc_status* kvc_seq_offload(kvc_cache* cache, int32_t seq_id, const char* store,
                            const char* key) {
  return kvc::guarded([&] {
    kvc::require(cache != nullptr, "cache is NULL");
    require_store_name(store);
    const std::string checked = checked_key(key);
    const kvc::Store& target = cache->impl->context().store(store);
    uint64_t changes = 0;
    const kvc::support::LargeBytes bytes = cache->impl->export_bytes(seq_id, &changes);
    target.put(checked, bytes.data(), bytes.size());
    cache->impl->remove_sequence(seq_id, changes);
  });
}

kvc_status* kvc_seq_restore(kvc_cache* cache, int32_t seq_id, const char* store,
                            const char* key) {
  return kvc::guarded([&] {
    kvc::require(cache != nullptr, "cache is NULL");
    require_store_name(store);
    const std::string checked = checked_key(key);
    const kvc::Store& source = cache->impl->context().store(store);
    cache->impl->check_new_sequence_id(seq_id);
    const kvc::StoredValue bytes = source.get(checked);
    cache->impl->import_sequence(seq_id, decode_value(bytes, source, checked));
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
  p.chunk_tokens = kDefaultChunkTokens;
  kvc::init_versioned(prefix, struct_size, p);
}

kvc_status* kvc_prefix_save(kvc_cache* cache, int32_t seq_id, const char* store,
                            const kvc_prefix* prefix, int32_t* out_tokens_saved) {
  return kvc::guarded([&] {
    kvc::require(cache != nullptr, "cache is NULL");
    require_store_name(store);
    const kvc_prefix p = checked_prefix(prefix);
    kvc::require(out_tokens_saved != nullptr, "out_tokens_saved is NULL");
    const kvc::Store& target = cache->impl->context().store(store);
    const int32_t n_chunks = p.n_tokens / p.chunk_tokens;
    const kvc::SequenceImage image =
        cache->impl->export_sequence(seq_id, static_cast<size_t>(n_chunks) * p.chunk_tokens);
    kvc::check_prefix_heads(image, seq_id, n_chunks * p.chunk_tokens);
    kvc::PrefixKeys keys(identity_of(*cache->impl, p), p.token_ids);
    for (int32_t c = 0; c < n_chunks; ++c) {
      const std::string key = keys.next();
      if (target.exists(key)) continue;
      const std::vector<uint8_t> bytes = kvc::encode(kvc::prefix_chunk(image, c, p.chunk_tokens));
      target.put(key, bytes.data(), bytes.size());
    }
    *out_tokens_saved = n_chunks * p.chunk_tokens;
  });
}

kvc_status* kvc_prefix_load(kvc_cache* cache, int32_t seq_id, const char* store,
                            const kvc_prefix* prefix, int32_t* out_tokens_restored) {
  return kvc::guarded([&] {
    kvc::require(cache != nullptr, "cache is NULL");
    require_store_name(store);
    const kvc_prefix p = checked_prefix(prefix);
    kvc::require(out_tokens_restored != nullptr, "out_tokens_restored is NULL");
    const kvc::Store& source = cache->impl->context().store(store);
    cache->impl->check_new_sequence_id(seq_id);
    const kvc::PrefixIdentity identity = identity_of(*cache->impl, p);
    kvc::PrefixKeys keys(identity, p.token_ids);
    kvc::SequenceImage joined;
    int32_t found = 0;
    while (found < p.n_tokens / p.chunk_tokens) {
      const std::string key = keys.next();
      kvc::StoredValue bytes;
      try {
        bytes = source.get(key);
      } catch (const kvc::Error& e) {
        if (e.code() == KVC_ERR_NOT_FOUND) break;
        throw;
      }
      const kvc::SequenceImage chunk = decode_value(bytes, source, key);
      kvc::check_chunk(chunk, identity, found, key);
      kvc::append_chunk(joined, chunk);
      ++found;
    }
    if (found == 0) {
      cache->impl->create_sequence(seq_id);
    } else {
      cache->impl->import_sequence(seq_id, std::move(joined));
    }
    *out_tokens_restored = found * p.chunk_tokens;
  });
}

}  // extern "C"
