#include "attention_block.hpp"

#include <algorithm>
#include <cmath>
#include <limits>
#include <memory>

#include "quantized_rows.hpp"

namespace kvc::cpu {
namespace {

constexpr float kNoLogit = -std::numeric_limits<float>::infinity();
// Logits kept for the statistics pass, per thread: 4 MiB, a decode group's over 131k keys or
// a 64-row prefill block's over 8k.
constexpr size_t kMaxKeptLogits = size_t{1} << 20;

// Rounds the scaled query row q to q8_0 (kvc_format_query_format), into the workspace's
// arrays for the integer kernels at `row` and back into q as f32 for the others.
void round_query(float* q, size_t row, AttentionWorkspace& w) {
  const size_t d = w.head_dim;
  q8_0_from_f32(q, w.q_row.data(), d);
  const unsigned char* group = w.q_row.data();
  for (size_t g = 0; g < d / kQuantGroup; ++g, group += 2 + kQuantGroup) {
    const float scale = scale_of(group);
    w.q_scales[row * (d / kQuantGroup) + g] = scale;
    for (size_t i = 0; i < kQuantGroup; ++i) {
      const size_t e = g * kQuantGroup + i;
      const auto value = static_cast<int8_t>(group[2 + i]);
      w.q_values[row * d + e] = value;
      w.q_magnitudes[row * d + e] = static_cast<uint8_t>(value < 0 ? -value : value);
      q[e] = static_cast<float>(value) * scale;
    }
  }
}

// Which quantized kernels read a block of `rows` rows of `dtype` where they are stored; null
// when the rows go through tile_rows instead.
const QuantizedKernels* quantized_in_place(kvc_dtype dtype, size_t rows, const AttentionShape& s) {
  if (!kvc_format_has_scales(dtype) || rows > s.kernels->max_rows_in_place) return nullptr;
  return s.kernels->quantized;
}

// Queries as f32 rows, scaled: the kernels' dot products are then the logits before soft-cap.
// Rounded as well where keys are of a format with scales; when other keys are not, their exact
// rows are kept in q_exact first.
void load_queries(const kvc_attend_job& job, const AttentionShape& s, AttentionWorkspace& w) {
  const size_t d = s.head_dim;
  const size_t q_elem = kvc_format_row_bytes(job.q_dtype, 1);
  w.block_visible = {std::numeric_limits<int64_t>::max(), std::numeric_limits<int64_t>::min()};
  for (size_t i = 0; i < w.n_queries; ++i) {
    const size_t query = w.first_query + i;
    const VisibleRange visible = visible_range(job.q_pos[query], s.sliding_window);
    w.visible[i] = visible;
    w.block_visible.first = std::min(w.block_visible.first, visible.first);
    w.block_visible.last = std::max(w.block_visible.last, visible.last);
    const char* q_token = static_cast<const char*>(job.q) + query * job.q_stride * q_elem;
    for (size_t g = 0; g < s.group_size; ++g) {
      float* q = w.q.data() + (i * s.group_size + g) * s.padded_dim;
      s.kernels->convert(q_token + g * d * q_elem, job.q_dtype, q, d);
      kvc_rotation_apply(w.k_rotation, q, int32_t(d));
      for (size_t e = 0; e < d; ++e) q[e] *= s.scale;
      if (!s.rounded_queries) continue;
      if (s.exact_queries) std::copy_n(q, s.padded_dim, w.q_exact.data() + (q - w.q.data()));
      round_query(q, i * s.group_size + g, w);
    }
  }
}

// Folds one scored tile into each row's online softmax state: rescales the row's output
// when its max grows and leaves the tile's weights in w.weights for the V pass.
void update_softmax(size_t n_keys, const AttentionShape& s, AttentionWorkspace& w) {
  for (size_t row = 0; row < w.rows(); ++row) {
    const float* logits = w.logits.data() + row * kTileKeys;
    float* weights = w.weights.data() + row * kTileKeys;
    const float tile_max = w.tile_max[row];
    if (tile_max == kNoLogit) {
      std::fill_n(weights, n_keys, 0.0f);
      continue;
    }
    float& row_max = w.row_max[row];
    if (tile_max > row_max) {
      const float correction = std::exp(row_max - tile_max);
      w.row_sum[row] *= correction;
      float* acc = w.acc.data() + row * s.padded_dim;
      for (size_t e = 0; e < s.padded_dim; ++e) acc[e] *= correction;
      row_max = tile_max;
    }
    w.row_sum[row] += s.kernels->softmax_weights(logits, n_keys, row_max, weights);
  }
}

}  // namespace

AttentionWorkspace::AttentionWorkspace(const AttentionShape& s)
    : head_dim(s.head_dim),
      padded_dim(s.padded_dim),
      group_size(s.group_size),
      visible(s.queries_per_block),
      q(s.queries_per_block * s.group_size * s.padded_dim),
      q_exact(s.rounded_queries && s.exact_queries ? q.size() : 0),
      acc(q.size()),
      row_max(s.queries_per_block * s.group_size),
      row_sum(row_max.size()),
      logits(row_max.size() * kTileKeys),
      tile_max(row_max.size()),
      weights(logits.size()),
      q_values(s.rounded_queries ? q.size() : 0),
      q_magnitudes(q_values.size()),
      q_scales(q_values.size() / kQuantGroup),
      q_row(kvc_format_row_bytes(KVC_DTYPE_Q8_0, s.head_dim)),
      k(kTileKeys * s.padded_dim),
      v(k.size()) {}

bool AttentionWorkspace::fits(const AttentionShape& s) const {
  return head_dim == s.head_dim && padded_dim == s.padded_dim && group_size == s.group_size &&
         visible.size() == s.queries_per_block &&
         q_values.empty() == !s.rounded_queries &&
         q_exact.empty() == !(s.rounded_queries && s.exact_queries);
}

AttentionWorkspace& thread_workspace(const AttentionShape& s) {
  thread_local std::unique_ptr<AttentionWorkspace> workspace;
  if (!workspace || !workspace->fits(s)) workspace = std::make_unique<AttentionWorkspace>(s);
  return *workspace;
}

void score_tile(const Tile& tile, const AttentionShape& s, AttentionWorkspace& w,
                Prefetch& ahead) {
  if (const QuantizedKernels* quantized = quantized_in_place(tile.k_dtype, w.rows(), s)) {
    quantized->logits(w.quantized_queries(), w.rows(), tile.k, tile.k_dtype, tile.n,
                      w.logits.data(), w.tile_max.data(), ahead);
  } else {
    const TileRows k = tile_rows(tile.k, tile.k_dtype, tile, w.rows(), s, w.k.data(), w.k_rows);
    s.kernels->logits(w.queries_for(tile.k_dtype), w.rows(), k.rows, k.dtype, tile.n,
                      s.padded_dim, w.logits.data(), w.tile_max.data(), ahead);
  }
  for (size_t row = 0; row < w.rows(); ++row) {
    float* logits = w.logits.data() + row * kTileKeys;
    const VisibleRange visible = w.visible[row / s.group_size];
    const bool sees_all = visible.contains(tile.lowest) && visible.contains(tile.highest);
    if (s.softcap <= 0.0f && sees_all) continue;
    if (s.softcap > 0.0f)
      for (size_t t = 0; t < tile.n; ++t) logits[t] = s.softcap * std::tanh(logits[t] / s.softcap);
    if (!sees_all)
      for (size_t t = 0; t < tile.n; ++t)
        if (!visible.contains(tile.pos[t])) logits[t] = kNoLogit;
    max_of_rows(logits, 1, tile.n, &w.tile_max[row]);
  }
}

void keep_logits_if(bool wanted, const kvc_attend_job& job, size_t count, const AttentionShape& s,
                    AttentionWorkspace& w) {
  w.keep_logits = false;
  if (!wanted) return;
  const size_t floats = max_tiles(job, s) * count * s.group_size * kTileKeys;
  w.keep_logits = floats <= kMaxKeptLogits;
  if (w.keep_logits && w.kept_logits.size() < floats) w.kept_logits.resize(floats);
}

void attend_block(const kvc_attend_job& job, size_t first, size_t count, KeyRange keys,
                  const AttentionShape& s, AttentionWorkspace& w) {
  w.first_query = first;
  w.n_queries = count;
  w.kept_tiles = 0;
  load_queries(job, s, w);
  std::fill_n(w.acc.begin(), w.rows() * s.padded_dim, 0.0f);
  std::fill_n(w.row_max.begin(), w.rows(), kNoLogit);
  std::fill_n(w.row_sum.begin(), w.rows(), 0.0f);
  for_each_visible_tile(job, keys, w.block_visible, s, [&](const Tile& tile, const Tile* next) {
    // The next tile's K is asked for while this one's is scored, its V while this one's V is
    // weighed.
    Prefetch next_keys = next ? prefetch_rows(next->k_runs, *next) : Prefetch{};
    score_tile(tile, s, w, next_keys);
    if (w.keep_logits) {
      const size_t floats = w.rows() * kTileKeys;
      std::copy_n(w.logits.data(), floats, w.kept_logits.data() + w.kept_tiles++ * floats);
    }
    update_softmax(tile.n, s, w);
    Prefetch next_values = next ? prefetch_rows(next->v_runs, *next) : Prefetch{};
    if (const QuantizedKernels* quantized = quantized_in_place(tile.v_dtype, w.rows(), s)) {
      quantized->accumulate(w.acc.data(), w.rows(), w.weights.data(), tile.v, tile.v_dtype,
                            tile.n, s.padded_dim, next_values);
      return;
    }
    const TileRows v = tile_rows(tile.v, tile.v_dtype, tile, w.rows(), s, w.v.data(), w.v_rows);
    s.kernels->accumulate(w.acc.data(), w.rows(), w.weights.data(), v.rows, v.dtype, tile.n,
                          s.padded_dim, next_values);
  });
}

void write_output(const kvc_attend_job& job, const AttentionShape& s, const AttentionWorkspace& w) {
  for (size_t row = 0; row < w.rows(); ++row) {
    const size_t query = w.first_query + row / s.group_size;
    float* out = job.out + query * job.out_stride + (row % s.group_size) * s.head_dim;
    const float* acc = w.acc.data() + row * s.padded_dim;
    // A row that saw no key keeps row_sum 0 and writes zeros.
    const float inv_sum = w.row_sum[row] > 0.0f ? 1.0f / w.row_sum[row] : 0.0f;
    for (size_t e = 0; e < s.head_dim; ++e) out[e] = acc[e] * inv_sum;
  }
}

}  // namespace kvc::cpu
