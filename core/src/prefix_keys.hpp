// The store keys of a prompt prefix's chunks (docs/stores.md, "Prefix keys"): SHA-256 of a
// version tag, the model, the cache's shape, dtype and stored statistics, the chunk size and
// every token id up to the chunk's end.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "kvcache/kvcache.h"

namespace kvc {

// What besides the token ids decides whether two caches may share a chunk.
struct PrefixIdentity {
  std::string model;
  int32_t layers, kv_heads, q_heads, head_dim;
  kvc_dtype dtype;
  uint32_t stats;  // kvc_stat_flags stored per token
  int32_t chunk_tokens;
};

// The keys of chunks 0 .. n_chunks-1 ("kvc-prefix-" and 64 lowercase hex digits), hashing
// each token once: token_ids holds at least n_chunks * chunk_tokens ids.
std::vector<std::string> prefix_chunk_keys(const PrefixIdentity& identity,
                                           const int32_t* token_ids, int32_t n_chunks);

}  // namespace kvc
