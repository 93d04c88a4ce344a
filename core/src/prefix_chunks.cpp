#include "prefix_chunks.hpp"

#include <algorithm>
#include <iterator>

#include "kvcache/kvcache_error.hpp"
#include "kvcache/kvcache_format.h"
#include "quote.hpp"

namespace kvc {
namespace {

std::string head_name(size_t index, int32_t kv_heads) {
  return "layer " + std::to_string(index / static_cast<size_t>(kv_heads)) + ", kv_head " +
         std::to_string(index % static_cast<size_t>(kv_heads));
}


template <class T>
void append_range(std::vector<T>& to, const std::vector<T>& from, size_t first, size_t count) {
  to.insert(to.end(), from.begin() + static_cast<std::ptrdiff_t>(first),
            from.begin() + static_cast<std::ptrdiff_t>(first + count));
}

}  // namespace

void check_prefix_heads(const SequenceImage& image, int32_t seq_id, int32_t tokens) {
  for (size_t h = 0; h < image.heads.size(); ++h) {
    const std::vector<int32_t>& positions = image.heads[h].positions;
    const std::string where =
        "prefix: sequence " + std::to_string(seq_id) + " " + head_name(h, image.kv_heads);
    if (image.heads[h].demoted > 0) {
      throw Error(KVC_ERR_UNSUPPORTED,
                  where + " holds demoted tokens (policy.demote): a prefix is saved from heads "
                          "holding positions 0, 1, ... in order in the cache's formats");
    }
    const size_t checked = std::min(positions.size(), static_cast<size_t>(tokens));
    for (size_t i = 0; i < checked; ++i) {
      if (positions[i] != static_cast<int32_t>(i)) {
        throw Error(KVC_ERR_UNSUPPORTED,
                    where + " holds position " + std::to_string(positions[i]) + " at index " +
                        std::to_string(i) +
                        ": a prefix is saved from heads holding positions 0, 1, ... in order, "
                        "as an uncompressed head does");
      }
    }
    if (positions.size() < static_cast<size_t>(tokens)) {
      throw Error(KVC_ERR_UNSUPPORTED, where + " holds " + std::to_string(positions.size()) +
                                           " tokens, fewer than the " + std::to_string(tokens) +
                                           " of the whole chunks to save");
    }
  }
}

SequenceImage prefix_chunk(const SequenceImage& image, int32_t chunk, int32_t chunk_tokens) {
  SequenceImage out;
  out.layers = image.layers;
  out.kv_heads = image.kv_heads;
  out.q_heads = image.q_heads;
  out.head_dim = image.head_dim;
  out.k_dtype = image.k_dtype;
  out.v_dtype = image.v_dtype;
  out.k_rotation = image.k_rotation;
  out.layout = image.layout;
  out.stats = image.stats;
  out.triggers.assign(static_cast<size_t>(image.layers), LayerTriggers{});
  const size_t first = static_cast<size_t>(chunk) * static_cast<size_t>(chunk_tokens);
  const size_t count = static_cast<size_t>(chunk_tokens);
  const size_t d = static_cast<size_t>(image.head_dim);
  const size_t k_row = kvc_format_row_bytes(image.k_dtype, d);
  const size_t v_row = kvc_format_row_bytes(image.v_dtype, d);
  out.heads.resize(image.heads.size());
  for (size_t h = 0; h < image.heads.size(); ++h) {
    const HeadImage& from = image.heads[h];
    HeadImage& to = out.heads[h];
    append_range(to.positions, from.positions, first, count);
    append_range(to.k, from.k, first * k_row, count * k_row);
    append_range(to.v, from.v, first * v_row, count * v_row);
    for (size_t s = 0; s < std::size(from.stats); ++s) {
      if (!from.stats[s].empty()) append_range(to.stats[s], from.stats[s], first, count);
    }
    to.seen = static_cast<int64_t>(first + count);
  }
  return out;
}

void check_chunk(const SequenceImage& image, const PrefixIdentity& identity, int32_t chunk,
                 const std::string& key) {
  const std::string where = "prefix chunk " + std::to_string(chunk) + " (key " + quote(key) + ")";
  const auto mismatch = [&](const std::string& problem) {
    return Error(KVC_ERR_IO, where + ": the value does not match its key: " + problem);
  };
  if (image.layers != identity.layers || image.kv_heads != identity.kv_heads ||
      image.q_heads != identity.q_heads || image.head_dim != identity.head_dim ||
      image.k_dtype != identity.k_dtype || image.v_dtype != identity.v_dtype ||
      image.k_rotation != identity.k_rotation || image.stats != identity.stats) {
    throw mismatch("it holds another shape, dtype, rotation of K or set of statistics");
  }
  if (image.demoted) throw mismatch("it holds demoted tokens, which no prefix chunk does");
  const int64_t first = static_cast<int64_t>(chunk) * identity.chunk_tokens;
  for (size_t h = 0; h < image.heads.size(); ++h) {
    const std::vector<int32_t>& positions = image.heads[h].positions;
    bool exact = positions.size() == static_cast<size_t>(identity.chunk_tokens);
    for (size_t i = 0; exact && i < positions.size(); ++i) {
      exact = positions[i] == first + static_cast<int64_t>(i);
    }
    if (!exact) {
      throw mismatch(head_name(h, image.kv_heads) + " does not hold exactly positions " +
                     std::to_string(first) + ".." +
                     std::to_string(first + identity.chunk_tokens - 1));
    }
  }
}

void append_chunk(SequenceImage& joined, const SequenceImage& chunk) {
  if (joined.heads.empty()) {  // the first chunk: its header, fresh counters, and the
                               // triggers of a prompt prefilled so far
    joined.layers = chunk.layers;
    joined.kv_heads = chunk.kv_heads;
    joined.q_heads = chunk.q_heads;
    joined.head_dim = chunk.head_dim;
    joined.k_dtype = chunk.k_dtype;
    joined.v_dtype = chunk.v_dtype;
    joined.k_rotation = chunk.k_rotation;
    joined.layout = chunk.layout;
    joined.stats = chunk.stats;
    joined.heads.resize(chunk.heads.size());
    // As after a prompt chunk's attention: a "once" compression is pending (only a cache
    // whose policy compresses once reads it).
    joined.triggers.assign(static_cast<size_t>(chunk.layers), LayerTriggers{0, true});
  }
  const size_t d = static_cast<size_t>(chunk.head_dim);
  const size_t k_row = kvc_format_row_bytes(chunk.k_dtype, d);
  const size_t v_row = kvc_format_row_bytes(chunk.v_dtype, d);
  for (size_t h = 0; h < joined.heads.size(); ++h) {
    HeadImage& to = joined.heads[h];
    const HeadImage& from = chunk.heads[h];
    to.positions.insert(to.positions.end(), from.positions.begin(), from.positions.end());
    const size_t n = from.positions.size();
    to.k.insert(to.k.end(), from.k_rows(), from.k_rows() + n * k_row);
    to.v.insert(to.v.end(), from.v_rows(), from.v_rows() + n * v_row);
    for (size_t s = 0; s < std::size(to.stats); ++s) {
      to.stats[s].insert(to.stats[s].end(), from.stats[s].begin(), from.stats[s].end());
    }
    to.seen = static_cast<int64_t>(to.positions.size());
  }
}

}  // namespace kvc
