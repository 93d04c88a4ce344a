// A kvc_prefix read and checked, for the store calls and the prefix cache's alike.
#pragma once

#include <cstdint>

#include "handles.hpp"
#include "prefix_keys.hpp"
#include "versioned_init.hpp"

namespace kvc {

constexpr int32_t kDefaultChunkTokens = 256;
constexpr int32_t kMaxChunkTokens = 65536;

// `reads_chunk_tokens`: false for the prefix cache's calls, whose unit is the block.
inline PrefixRequest checked_prefix(const kvc_prefix* in, bool reads_chunk_tokens) {
  kvc_prefix defaults{};
  defaults.chunk_tokens = kDefaultChunkTokens;
  const kvc_prefix prefix = read_versioned(in, defaults, "prefix");
  require(prefix.model != nullptr && *prefix.model != '\0', "prefix->model is NULL or empty");
  require(prefix.n_tokens >= 0, "prefix->n_tokens is negative");
  require(prefix.token_ids != nullptr || prefix.n_tokens == 0,
          "prefix->token_ids is NULL and prefix->n_tokens > 0");
  require(!reads_chunk_tokens ||
              (prefix.chunk_tokens >= 1 && prefix.chunk_tokens <= kMaxChunkTokens),
          "prefix->chunk_tokens is outside 1..65536");
  return {prefix.model, prefix.token_ids, prefix.n_tokens, prefix.chunk_tokens};
}

}  // namespace kvc
