// Sequences of a cache for the C API fault cases: 4 layers x 8 KV heads of 128, f16, filled
// with random K/V, and their export images.
#pragma once

#include <cstdint>
#include <random>
#include <string>
#include <vector>

#include "../../test_support.hpp"

namespace kvc::store_tests {

constexpr int32_t kLayers = 4, kKvHeads = 8, kQHeads = 8, kHeadDim = 128;

inline kvt::CachePtr cache_in(kvc_context* context) {
  kvc_cache_params p;
  kvc_cache_params_init(&p);
  p.layers = kLayers;
  p.kv_heads = kKvHeads;
  p.q_heads = kQHeads;
  p.head_dim = kHeadDim;
  p.dtype = KVC_DTYPE_F16;
  p.memory_limit = size_t{256} << 20;
  return kvt::make_cache(context, p);
}

// Sequence `seq` with `tokens` tokens of K/V on every layer, random from `seed`: 16 KiB per
// token.
inline void fill(kvc_cache* cache, int32_t seq, int32_t tokens, uint32_t seed = 1) {
  KVT_REQUIRE_OK(kvc_seq_create(cache, seq));
  std::mt19937 random(seed);
  std::uniform_real_distribution<float> uniform(-1.0f, 1.0f);
  std::vector<float> k(static_cast<size_t>(tokens) * kKvHeads * kHeadDim);
  std::vector<float> v(k.size());
  std::vector<int32_t> pos(static_cast<size_t>(tokens));
  for (int32_t i = 0; i < tokens; ++i) pos[static_cast<size_t>(i)] = i;
  for (int32_t layer = 0; layer < kLayers; ++layer) {
    for (float& x : k) x = uniform(random);
    for (float& x : v) x = uniform(random);
    kvc_batch batch;
    kvc_batch_init(&batch, 1, &seq, &tokens, pos.data());
    const kvc_tensor tk = kvt::tensor(k.data(), KVC_DTYPE_F32);
    const kvc_tensor tv = kvt::tensor(v.data(), KVC_DTYPE_F32);
    KVT_REQUIRE_OK(kvc_append(cache, layer, &batch, &tk, &tv));
  }
}

inline std::vector<unsigned char> image_of(kvc_cache* cache, int32_t seq) {
  size_t size = 0;
  KVT_REQUIRE_OK(kvc_seq_export_size(cache, seq, &size));
  std::vector<unsigned char> bytes(size);
  size_t written = 0;
  KVT_REQUIRE_OK(kvc_seq_export(cache, seq, bytes.data(), bytes.size(), &written));
  bytes.resize(written);
  return bytes;
}

inline bool has_sequence(kvc_cache* cache, int32_t seq) {
  int32_t n = 0;
  return kvt::Status{kvc_seq_length(cache, seq, 0, 0, &n)}.ok();
}

}  // namespace kvc::store_tests
