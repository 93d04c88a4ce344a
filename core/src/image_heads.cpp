#include "image_heads.hpp"

#include <algorithm>
#include <iterator>

namespace kvc {
namespace {

size_t blocks_for(size_t tokens, int32_t capacity) {
  const auto per_block = static_cast<size_t>(capacity);
  return tokens == 0 ? 0 : (tokens + per_block - 1) / per_block;
}

// One head's new blocks, tier 1 then tier 0, written from the image.
std::vector<Segment> write_blocks(const HeadImage& head, void* const* blocks, Backend& backend,
                                  const Geometry& g) {
  std::vector<Segment> segments;
  const size_t n = head.positions.size();
  const uint8_t* k = head.k_rows();
  const uint8_t* v = head.v_rows();
  size_t token = 0;
  for (const uint8_t tier : {uint8_t{1}, uint8_t{0}}) {
    const size_t end = tier == 1 ? static_cast<size_t>(head.demoted) : n;
    const TierRows& rows = g.rows(tier);
    const int32_t capacity = g.block_capacity(tier);
    while (token < end) {
      const auto count =
          static_cast<int32_t>(std::min(end - token, static_cast<size_t>(capacity)));
      const Segment s{static_cast<unsigned char*>(blocks[segments.size()]), capacity, count, tier};
      const size_t k_bytes = static_cast<size_t>(count) * rows.k_row_bytes;
      const size_t v_bytes = static_cast<size_t>(count) * rows.v_row_bytes;
      backend.copy(segment_k(s), k, k_bytes, KVC_COPY_HOST_TO_DEVICE);
      backend.copy(segment_v(s, g), v, v_bytes, KVC_COPY_HOST_TO_DEVICE);
      backend.copy(segment_pos(s, g), head.positions.data() + token,
                   static_cast<size_t>(count) * sizeof(int32_t), KVC_COPY_HOST_TO_DEVICE);
      k += k_bytes;
      v += v_bytes;
      token += static_cast<size_t>(count);
      segments.push_back(s);
    }
  }
  return segments;
}

// The tracked statistics, each at its region of an array of n tokens' capacity.
void write_stats(const HeadImage& head, float* stats, Backend& backend, const Geometry& g) {
  const size_t n = head.positions.size();
  size_t region = 0;
  for (size_t s = 0; s < std::size(kStoredStats); ++s) {
    if (!(g.stats & kStoredStats[s])) continue;
    backend.copy(stats + region * n, head.stats[s].data(), n * sizeof(float),
                 KVC_COPY_HOST_TO_DEVICE);
    ++region;
  }
}

}  // namespace

void build_tiered_heads(const SequenceImage& image, const std::vector<HeadStorage*>& heads,
                        Backend& backend, BlockPool& pool, const Geometry& g) {
  const bool tracked = g.stat_count() > 0;
  std::vector<size_t> head_blocks;
  size_t blocks = 0;
  std::vector<size_t> sizes;
  for (const HeadImage& head : image.heads) {
    const size_t n = head.positions.size();
    const auto demoted = static_cast<size_t>(head.demoted);
    head_blocks.push_back(blocks_for(demoted, g.block_capacity(1)) +
                          blocks_for(n - demoted, g.block_capacity(0)));
    blocks += head_blocks.back();
    if (tracked && n > 0) sizes.push_back(g.stats_bytes_for(static_cast<int32_t>(n)));
  }
  BlockPool::Taken taken = pool.take(blocks, sizes);
  std::vector<std::vector<Segment>> segments(heads.size());
  std::vector<float*> stats(heads.size(), nullptr);
  try {
    size_t next_block = 0, next_memory = 0;
    for (size_t h = 0; h < heads.size(); ++h) {
      const HeadImage& head = image.heads[h];
      segments[h] = write_blocks(head, taken.blocks.data() + next_block, backend, g);
      next_block += head_blocks[h];
      if (!tracked || head.positions.empty()) continue;
      stats[h] = static_cast<float*>(taken.memory[next_memory++]);
      write_stats(head, stats[h], backend, g);
    }
  } catch (...) {
    for (void* block : taken.blocks) pool.give_back_block(block);
    for (size_t i = 0; i < taken.memory.size(); ++i) pool.release(taken.memory[i], sizes[i]);
    throw;
  }
  for (size_t h = 0; h < heads.size(); ++h) {
    const HeadImage& head = image.heads[h];
    const auto n = static_cast<int32_t>(head.positions.size());
    const int32_t newest =
        n == 0 ? -1 : *std::max_element(head.positions.begin(), head.positions.end());
    heads[h]->adopt(std::move(segments[h]), stats[h], stats[h] ? n : 0, n, newest, head.seen,
                    head.effective_budget);
  }
}

}  // namespace kvc
