// A prompt prefix's K/V cut into chunks of sequence images and joined back (kvc_prefix_save,
// kvc_prefix_load): chunk c holds, on every (layer, KV head), exactly the tokens at positions
// [c * chunk_tokens, (c + 1) * chunk_tokens) with their K, V and statistics.
#pragma once

#include <cstdint>
#include <string>

#include "prefix_keys.hpp"
#include "sequence_image.hpp"

namespace kvc {

// Refuses with UNSUPPORTED, naming the head and what it found, an exported sequence some head
// of which does not hold positions 0 .. tokens-1 at indices 0 .. tokens-1 in the cache's formats
// (no demoted tokens).
void check_prefix_heads(const SequenceImage& image, int32_t seq_id, int32_t tokens);
// Chunk `chunk` of an image check_prefix_heads() accepted; default triggers.
SequenceImage prefix_chunk(const SequenceImage& image, int32_t chunk, int32_t chunk_tokens);
// Refuses with IO, naming the chunk and its key, a decoded value that is not chunk `chunk` of
// a cache with `identity`'s shape, dtype and statistics.
void check_chunk(const SequenceImage& image, const PrefixIdentity& identity, int32_t chunk,
                 const std::string& key);
// Appends the next checked chunk to the chunks before it (`joined` starts as an empty image):
// each head's seen count is its token count, its budget none, and every layer's triggers
// those of a prompt prefilled so far (a "once" compression pending, no decode steps).
void append_chunk(SequenceImage& joined, const SequenceImage& chunk);

}  // namespace kvc
