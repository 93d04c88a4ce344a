// The store keys of a prompt prefix's chunks (docs/stores.md, "Prefix keys"): SHA-256 of a
// version tag, the model, the cache's shape, dtype, rotation of K and stored statistics, the
// chunk size and
// every token id up to the chunk's end.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "kvcache/kvcache.h"

namespace kvc {

// What besides the token ids decides whether two caches may share a chunk.
struct PrefixIdentity {
  std::string model;
  int32_t layers, kv_heads, q_heads, head_dim;
  kvc_dtype k_dtype, v_dtype;
  kvc_rotation k_rotation;
  uint32_t stats;  // kvc_stat_flags stored per token
  int32_t chunk_tokens;
};

// A checked kvc_prefix.
struct PrefixRequest {
  std::string model;
  const int32_t* token_ids;  // n_tokens ids
  int32_t n_tokens;
  int32_t chunk_tokens;  // >= 1
};

// The keys of chunks 0, 1, ... in turn ("kvc-prefix-" and 64 lowercase hex digits): one
// SHA-256 state carried forward, so each token is hashed once, and only as far as asked.
class PrefixKeys {
 public:
  // token_ids must hold chunk_tokens ids for every chunk whose key is asked for.
  PrefixKeys(const PrefixIdentity& identity, const int32_t* token_ids);
  ~PrefixKeys();
  PrefixKeys(const PrefixKeys&) = delete;
  PrefixKeys& operator=(const PrefixKeys&) = delete;

  // The key of the next chunk.
  std::string next();

 private:
  struct State;
  std::unique_ptr<State> state_;
};

}  // namespace kvc
