#include "attention_block.hpp"

#include <algorithm>
#include <cmath>
#include <limits>

namespace kvc::cpu {
namespace {

constexpr float kNoLogit = -std::numeric_limits<float>::infinity();

void load_queries(const kvc_attend_job& job, const AttentionShape& s, AttentionWorkspace& w) {
  const size_t d = s.head_dim;
  const size_t q_elem = dtype_size(job.q_dtype);
  w.block_visible = {std::numeric_limits<int64_t>::max(), std::numeric_limits<int64_t>::min()};
  for (size_t i = 0; i < w.n_queries; ++i) {
    const size_t query = w.first_query + i;
    const VisibleRange visible = visible_range(job.q_pos[query], s.sliding_window);
    w.visible[i] = visible;
    w.block_visible.first = std::min(w.block_visible.first, visible.first);
    w.block_visible.last = std::max(w.block_visible.last, visible.last);
    const char* q_token = static_cast<const char*>(job.q) + query * job.q_stride * q_elem;
    for (size_t g = 0; g < s.group_size; ++g)
      load_row_f32(q_token + g * d * q_elem, job.q_dtype,
                   w.q.data() + (i * s.group_size + g) * d, d);
  }
}

// Folds one tile of keys into one query row's online softmax state.
void update_row(size_t row, const int32_t* pos, const float* k, const float* v, size_t n_keys,
                const AttentionShape& s, AttentionWorkspace& w) {
  const size_t d = s.head_dim;
  const VisibleRange visible = w.visible[row / s.group_size];
  const float* q = w.q.data() + row * d;
  float* acc = w.acc.data() + row * d;
  float tile_max = kNoLogit;
  for (size_t t = 0; t < n_keys; ++t) {
    w.logits[t] = visible.contains(pos[t]) ? logit(q, k + t * d, s) : kNoLogit;
    tile_max = std::max(tile_max, w.logits[t]);
  }
  if (tile_max == kNoLogit) return;
  float& row_max = w.row_max[row];
  float& row_sum = w.row_sum[row];
  if (tile_max > row_max) {
    const float correction = std::exp(row_max - tile_max);
    row_sum *= correction;
    scale(acc, correction, d);
    row_max = tile_max;
  }
  size_t n_seen = 0;
  for (size_t t = 0; t < n_keys; ++t) {
    if (w.logits[t] == kNoLogit) continue;
    w.weights[n_seen] = std::exp(w.logits[t] - row_max);
    w.values[n_seen] = v + t * d;
    row_sum += w.weights[n_seen];
    ++n_seen;
  }
  axpy_rows(acc, w.weights.data(), w.values.data(), n_seen, d);
}

void write_output(const kvc_attend_job& job, const AttentionShape& s,
                  const AttentionWorkspace& w) {
  const size_t d = s.head_dim;
  for (size_t row = 0; row < w.n_queries * s.group_size; ++row) {
    const size_t query = w.first_query + row / s.group_size;
    float* out = job.out + query * job.out_stride + (row % s.group_size) * d;
    const float* acc = w.acc.data() + row * d;
    // A row that saw no key keeps row_sum 0 and writes zeros.
    const float inv_sum = w.row_sum[row] > 0.0f ? 1.0f / w.row_sum[row] : 0.0f;
    for (size_t e = 0; e < d; ++e) out[e] = acc[e] * inv_sum;
  }
}

}  // namespace

AttentionWorkspace::AttentionWorkspace(const AttentionShape& s)
    : visible(s.queries_per_block),
      q(s.queries_per_block * s.group_size * s.head_dim),
      acc(q.size()),
      row_max(s.queries_per_block * s.group_size),
      row_sum(row_max.size()),
      logits(kTileKeys),
      weights(kTileKeys),
      values(kTileKeys),
      k(kTileKeys * s.head_dim),
      v(k.size()) {}

void attend_block(const kvc_attend_job& job, size_t first, size_t count,
                  const AttentionShape& s, AttentionWorkspace& w) {
  const size_t rows = count * s.group_size;
  w.first_query = first;
  w.n_queries = count;
  load_queries(job, s, w);
  std::fill_n(w.acc.begin(), rows * s.head_dim, 0.0f);
  std::fill_n(w.row_max.begin(), rows, kNoLogit);
  std::fill_n(w.row_sum.begin(), rows, 0.0f);
  for_each_visible_tile(job, w.block_visible,
                        [&](const kvc_segment& segment, size_t first_key, size_t n_keys) {
                          const float* k = tile_f32(segment.k, first_key, n_keys, s, w.k.data());
                          const float* v = tile_f32(segment.v, first_key, n_keys, s, w.v.data());
                          for (size_t row = 0; row < rows; ++row)
                            update_row(row, segment.pos + first_key, k, v, n_keys, s, w);
                        });
  write_output(job, s, w);
}

}  // namespace kvc::cpu
