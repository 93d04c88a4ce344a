// A context and a cache holding one sequence of random K/V, for the benchmarks that measure
// work over a full cache (attention, compression).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "kv_formats.hpp"
#include "kvcache/kvcache.h"
#include "options.hpp"

namespace kvc_bench {

struct CacheShape {
  int32_t tokens = 4096;
  int32_t layers = 8;
  int32_t kv_heads = 8;
  int32_t q_heads = 32;
  int32_t head_dim = 128;
  KvFormats formats;  // f16 K and V by default
  kvc_rotation k_rotation = KVC_ROTATION_NONE;
  uint64_t seed = 1;
  std::string backend;  // empty: the library's default (cpu)
  int32_t block_tokens = 16;

  /// Reads --tokens --layers --kv_heads --q_heads --head_dim --dtype --k_format --v_format
  /// --k_rotation --seed --backend --block_tokens.
  static CacheShape read(Options& opts);
  /// Bytes of K and V the sequence stores.
  uint64_t kv_bytes() const;
  /// Cache parameters of this shape (paged, block_tokens, no policy, a 64 MiB limit, the
  /// backend).
  kvc_cache_params params() const;
  /// Prints the shape as name=value lines.
  void report() const;
};

/// The options CacheShape::read() takes, for a subcommand's help text.
#define KVC_BENCH_CACHE_SHAPE_HELP                                                  \
  "  --tokens=N      tokens in the cache (default 4096)\n"                          \
  "  --layers=N      layers (default 8)\n"                                          \
  "  --kv_heads=N    KV heads (default 8)\n"                                        \
  "  --q_heads=N     query heads, a multiple of kv_heads (default 32)\n"            \
  "  --head_dim=N    head dimension (default 128)\n"                                \
  "  --dtype=D       format of K and V: f16, bf16, f32, q8_0 or q4_0 (default f16)\n" \
  "  --k_format=D --v_format=D  format of K, of V (default: --dtype's); q8_0 and\n" \
  "                  q4_0 need a head_dim that is a multiple of 32\n"            \
  "  --k_rotation=R  rotation of K: none or hadamard (default none)\n"             \
  "  --seed=N        seed of the random data (default 1)\n"                         \
  "  --backend=NAME  backend plugin, such as cpu or cuda (default: the library's)\n"  \
  "  --block_tokens=N  tokens per paged block (default 16)\n"

class FilledCache {
 public:
  /// A cache of `shape` (paged, shape.block_tokens) with the given policy (NULL: none) and
  /// budget, holding sequences 0 .. sequences-1 with shape.tokens tokens on every layer, in a
  /// context whose arena has `threads` threads (0: all cores).
  FilledCache(const CacheShape& shape, const char* policy, int32_t budget, int32_t sequences = 1,
              int threads = 0);
  ~FilledCache();
  FilledCache(const FilledCache&) = delete;
  FilledCache& operator=(const FilledCache&) = delete;

  kvc_cache* cache() const { return cache_; }
  /// One decode step's attention (one query token of every sequence at its next position, in
  /// one batch) on every layer, without storing anything; `params` NULL: the defaults.
  void attend_decode_step(const kvc_attention_params* params = nullptr);
  /// Bytes of K and V the cache holds.
  uint64_t kv_bytes() const { return shape_.kv_bytes() * static_cast<uint64_t>(sequences_); }

 private:
  CacheShape shape_;
  int32_t sequences_;
  kvc_context* context_ = nullptr;
  kvc_cache* cache_ = nullptr;
  std::vector<int32_t> seq_ids_, n_tokens_, positions_;
  std::vector<float> q_, out_;
};

}  // namespace kvc_bench
