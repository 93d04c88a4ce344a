#include "attention_stats.hpp"

#include <algorithm>
#include <cmath>
#include <cstddef>

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
  return {request.sum, request.last && query + 1 == n,
          request.window && query >= first_in_window};
}

}  // namespace

StatsRequest requested_stats(const kvc_attend_job& job) {
  StatsRequest request;
  for (int32_t si = 0; si < job.n_segments; ++si) {
    const kvc_segment& segment = job.segments[si];
    request.sum |= segment.attn_sum != nullptr;
    request.last |= segment.attn_last != nullptr;
    request.window |= segment.attn_window != nullptr;
  }
  return request;
}

void reset_latest_stats(const kvc_attend_job& job) {
  for (int32_t si = 0; si < job.n_segments; ++si) {
    const kvc_segment& segment = job.segments[si];
    if (segment.attn_last) std::fill_n(segment.attn_last, segment.count, 0.0f);
    if (segment.attn_window) std::fill_n(segment.attn_window, segment.count, 0.0f);
  }
}

void accumulate_stats(const kvc_attend_job& job, StatsRequest request, const AttentionShape& s,
                      AttentionWorkspace& w) {
  const size_t d = s.head_dim;
  const size_t rows = w.n_queries * s.group_size;
  const float head_weight = 1.0f / float(s.group_size);  // attn_last is a mean over heads
  for_each_visible_tile(job, w.block_visible, [&](const kvc_segment& segment, size_t first_key,
                                                  size_t n_keys) {
    const float* k = tile_f32(segment.k, first_key, n_keys, s, w.k.data());
    const int32_t* pos = segment.pos + first_key;
    for (size_t row = 0; row < rows; ++row) {
      const size_t query = w.first_query + row / s.group_size;
      const RowTargets targets = row_targets(query, job, request, s);
      if (!targets.any() || w.row_sum[row] <= 0.0f) continue;
      const VisibleRange visible = w.visible[row / s.group_size];
      const float* q = w.q.data() + row * d;
      const float inv_sum = 1.0f / w.row_sum[row];
      for (size_t t = 0; t < n_keys; ++t) {
        if (!visible.contains(pos[t])) continue;
        const float p = std::exp(logit(q, k + t * d, s) - w.row_max[row]) * inv_sum;
        const size_t key = first_key + t;
        if (targets.sum && segment.attn_sum) segment.attn_sum[key] += p;
        if (targets.last && segment.attn_last) segment.attn_last[key] += p * head_weight;
        if (targets.window && segment.attn_window) segment.attn_window[key] += p;
      }
    }
  });
}

}  // namespace kvc::cpu
