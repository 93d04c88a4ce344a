// What a cache stores for a sequence, read into host memory whatever the backend: the
// pointers of kvc_seq_view() are the backend's memory (device memory for cuda), so the suites
// read K, V, positions and statistics through kvc_seq_export() and the library's own decoder
// of those bytes (core/src/sequence_image.hpp) instead.
#pragma once

#include <cstdint>
#include <utility>
#include <vector>

#include "kvcache/kvcache.h"
#include "sequence_image.hpp"
#include "test_support.hpp"

namespace kvt {

// The sequence's kvc_seq_export() bytes.
inline std::vector<uint8_t> export_bytes(kvc_cache* cache, int32_t seq) {
  size_t size = 0;
  KVT_REQUIRE_OK(kvc_seq_export_size(cache, seq, &size));
  std::vector<uint8_t> bytes(size);
  size_t written = 0;
  KVT_REQUIRE_OK(kvc_seq_export(cache, seq, bytes.data(), bytes.size(), &written));
  REQUIRE(written == size);
  return bytes;
}

// Everything stored for the sequence, its heads at [layer * kv_heads + kv_head], each with its
// positions, K and V rows (raw storage bytes, in position order) and statistics.
inline kvc::SequenceImage stored_sequence(kvc_cache* cache, int32_t seq) {
  const std::vector<uint8_t> bytes = export_bytes(cache, seq);
  return kvc::decode(bytes.data(), bytes.size());
}

// What one (layer, KV head) of the sequence stores.
inline kvc::HeadImage stored_head(kvc_cache* cache, int32_t seq, int32_t layer,
                                  int32_t kv_head) {
  kvc::SequenceImage image = stored_sequence(cache, seq);
  REQUIRE(layer < image.layers);
  REQUIRE(kv_head < image.kv_heads);
  return std::move(image.heads[static_cast<size_t>(layer * image.kv_heads + kv_head)]);
}

// Every head's positions, K and V bytes, head after head: what two caches storing the same
// tokens hold alike.
inline std::vector<unsigned char> stored_bytes(kvc_cache* cache, int32_t seq) {
  std::vector<unsigned char> bytes;
  for (const kvc::HeadImage& head : stored_sequence(cache, seq).heads) {
    const auto* pos = reinterpret_cast<const unsigned char*>(head.positions.data());
    bytes.insert(bytes.end(), pos, pos + head.positions.size() * sizeof(int32_t));
    bytes.insert(bytes.end(), head.k.begin(), head.k.end());
    bytes.insert(bytes.end(), head.v.begin(), head.v.end());
  }
  return bytes;
}

// The positions one (layer, KV head) of the sequence stores, oldest first.
inline std::vector<int32_t> stored_positions(kvc_cache* cache, int32_t seq, int32_t layer,
                                             int32_t kv_head) {
  return stored_head(cache, seq, layer, kv_head).positions;
}

}  // namespace kvt
