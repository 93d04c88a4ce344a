#include "attention_stats.hpp"

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <limits>

namespace kvc::cpu {
namespace {

// The statistics that one (query, group head) row feeds.
struct RowTargets {
  bool sum = false;
  bool last = false;
  bool window = false;
  bool any() const { return sum || last || window; }
};

RowTargets row_targets(size_t query, const kvc_attend_job& job, StatsRequest request,
                       const AttentionShape& s) {
  const size_t n = size_t(job.n_queries);
  const size_t window = size_t(std::max(0, s.observation_window));
  const size_t first_in_window = n - std::min(n, window);
  return {request.sum, request.last && query + 1 == n, request.window && query >= first_in_window};
}

}  // namespace

StatsRequest requested_stats(const kvc_attend_job& job) {
  return {job.stats.attn_sum != nullptr, job.stats.attn_last != nullptr,
          job.stats.attn_window != nullptr};
}

void reset_latest_stats(const kvc_attend_job& job) {
  size_t tokens = 0;
  for (int32_t si = 0; si < job.n_segments; ++si) tokens += size_t(job.segments[si].count);
  if (job.stats.attn_last) std::fill_n(job.stats.attn_last, tokens, 0.0f);
  if (job.stats.attn_window) std::fill_n(job.stats.attn_window, tokens, 0.0f);
}

bool block_feeds_stats(const kvc_attend_job& job, StatsRequest request, size_t first,
                       size_t count, const AttentionShape& s) {
  // The block's last query feeds every statistic that any of its queries feeds.
  return row_targets(first + count - 1, job, request, s).any();
}

void accumulate_stats(const kvc_attend_job& job, StatsRequest request, const AttentionShape& s,
                      AttentionWorkspace& w) {
  if (!block_feeds_stats(job, request, w.first_query, w.n_queries, s)) return;
  const float head_weight = 1.0f / float(s.group_size);  // attn_last is a mean over heads
  const KeyRange all_keys{0, std::numeric_limits<size_t>::max()};
  // The tiles come in the order attend_block scored them, with the same keys and range.
  size_t tile_index = 0;
  for_each_visible_tile(job, all_keys, w.block_visible, s, [&](const Tile& tile, const Tile* next) {
    const float* logits = w.logits.data();
    if (w.keep_logits && tile_index < w.kept_tiles) {
      logits = w.kept_logits.data() + tile_index++ * w.rows() * kTileKeys;
    } else {
      Prefetch next_keys = next ? prefetch_rows(next->k_runs, *next) : Prefetch{};
      score_tile(tile, s, w, next_keys);
    }
    const kvc_head_stats& stats = job.stats;
    for (size_t row = 0; row < w.rows(); ++row) {
      const size_t query = w.first_query + row / s.group_size;
      const RowTargets targets = row_targets(query, job, request, s);
      if (!targets.any() || w.row_sum[row] <= 0.0f) continue;
      float* p = w.weights.data() + row * kTileKeys;  // probabilities, times row_sum
      s.kernels->softmax_weights(logits + row * kTileKeys, tile.n, w.row_max[row], p);
      const float inv_sum = 1.0f / w.row_sum[row];
      for (size_t t = 0; t < tile.n; ++t) {
        const size_t key = tile.key + t;
        if (targets.sum && stats.attn_sum) stats.attn_sum[key] += p[t] * inv_sum;
        if (targets.last && stats.attn_last) stats.attn_last[key] += p[t] * inv_sum * head_weight;
        if (targets.window && stats.attn_window) stats.attn_window[key] += p[t] * inv_sum;
      }
    }
  });
}

}  // namespace kvc::cpu
