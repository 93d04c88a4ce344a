#include "attention_kernel.hpp"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <vector>

#include "kvc/half.hpp"
#include "parallel.hpp"
#include "plugin_error.hpp"
#include "row_convert.hpp"
#include "row_math.hpp"

namespace kvc::cpu {
namespace {

// Keys converted and scored together: a K and a V tile of 32 rows of f32 stay in L1/L2
// while every query row of a block passes over them.
constexpr size_t kTileKeys = 32;
// Query rows (tokens x group heads) that share one pass over K/V.
constexpr size_t kBlockRows = 64;
constexpr float kNoLogit = -std::numeric_limits<float>::infinity();

struct Shape {
  size_t head_dim;
  size_t group_size;
  size_t queries_per_block;
  kvc_dtype storage_dtype;
  float scale;
  int32_t sliding_window;
  float softcap;
};

// Some consecutive query tokens of one job: the unit of parallel work.
struct QueryBlock {
  size_t job;
  size_t first;
  size_t count;
};

// Positions a query sees: first <= p <= last.
struct VisibleRange {
  int64_t first;
  int64_t last;
  bool contains(int32_t p) const { return first <= p && p <= last; }
};

VisibleRange visible_range(int32_t q_pos, int32_t sliding_window) {
  const int64_t first = sliding_window > 0 ? int64_t(q_pos) - sliding_window + 1
                                           : std::numeric_limits<int64_t>::min();
  return {first, q_pos};
}

// Per-thread scratch, reused across the blocks of one parallel chunk.
struct Workspace {
  explicit Workspace(const Shape& s)
      : visible(s.queries_per_block),
        q(s.queries_per_block * s.group_size * s.head_dim),
        acc(q.size()),
        row_max(s.queries_per_block * s.group_size),
        row_sum(row_max.size()),
        logits(kTileKeys),
        k(kTileKeys * s.head_dim),
        v(k.size()) {}
  std::vector<VisibleRange> visible;  // [queries_per_block]
  std::vector<float> q;        // [rows, head_dim]
  std::vector<float> acc;      // [rows, head_dim], unnormalised output
  std::vector<float> row_max;  // [rows], running max logit
  std::vector<float> row_sum;  // [rows], running softmax denominator
  std::vector<float> logits;   // [kTileKeys], of the row being updated
  std::vector<float> k;        // [kTileKeys, head_dim], converted tile
  std::vector<float> v;
};

kvc_attend_config read_config(const kvc_attend_config& given) {
  // Fields a smaller (older) struct lacks read as zero.
  kvc_attend_config config{};
  std::memcpy(&config, &given, std::min<size_t>(given.struct_size, sizeof config));
  return config;
}

void validate(const kvc_attend_job* jobs, size_t n_jobs, const kvc_attend_config& config) {
  if (config.head_dim <= 0)
    fail(KVC_ERR_INVALID_ARGUMENT, "head_dim must be > 0, got %d", config.head_dim);
  if (config.group_size <= 0)
    fail(KVC_ERR_INVALID_ARGUMENT, "group_size must be > 0, got %d", config.group_size);
  if (dtype_size(config.storage_dtype) == 0)
    fail(KVC_ERR_INVALID_ARGUMENT, "unknown storage dtype %d", int(config.storage_dtype));
  if (n_jobs > 0 && jobs == nullptr) fail(KVC_ERR_INVALID_ARGUMENT, "attend jobs are NULL");
  for (size_t j = 0; j < n_jobs; ++j) {
    const kvc_attend_job& job = jobs[j];
    if (job.q_dtype != config.storage_dtype && job.q_dtype != KVC_DTYPE_F32)
      fail(KVC_ERR_INVALID_ARGUMENT,
           "attend job %zu: query dtype %d is neither f32 nor the storage dtype", j,
           int(job.q_dtype));
    if (job.n_queries < 0)
      fail(KVC_ERR_INVALID_ARGUMENT, "attend job %zu: negative n_queries %d", j, job.n_queries);
    if (job.n_segments < 0 || (job.n_segments > 0 && job.segments == nullptr))
      fail(KVC_ERR_INVALID_ARGUMENT, "attend job %zu: bad segment list", j);
    for (int32_t s = 0; s < job.n_segments; ++s)
      if (job.segments[s].count < 0)
        fail(KVC_ERR_INVALID_ARGUMENT, "attend job %zu: segment %d has a negative count", j, s);
  }
}

Shape make_shape(const kvc_attend_config& config) {
  const size_t group = size_t(config.group_size);
  return {size_t(config.head_dim), group, std::max<size_t>(1, kBlockRows / group),
          config.storage_dtype, config.scale, config.sliding_window, config.softcap};
}

std::vector<QueryBlock> split_into_blocks(const kvc_attend_job* jobs, size_t n_jobs,
                                          const Shape& s) {
  std::vector<QueryBlock> blocks;
  for (size_t j = 0; j < n_jobs; ++j) {
    const size_t n = size_t(jobs[j].n_queries);
    for (size_t first = 0; first < n; first += s.queries_per_block)
      blocks.push_back({j, first, std::min(s.queries_per_block, n - first)});
  }
  return blocks;
}

// K or V rows [first, first + n) of a segment as f32: in place for f32 storage, else
// converted into the tile buffer.
const float* tile_f32(const void* rows, size_t first, size_t n, const Shape& s, float* buffer) {
  const size_t row_bytes = s.head_dim * dtype_size(s.storage_dtype);
  const char* base = static_cast<const char*>(rows) + first * row_bytes;
  if (s.storage_dtype == KVC_DTYPE_F32) return reinterpret_cast<const float*>(base);
  for (size_t t = 0; t < n; ++t)
    load_row_f32(base + t * row_bytes, s.storage_dtype, buffer + t * s.head_dim, s.head_dim);
  return buffer;
}

float logit(const float* q, const float* k, const Shape& s) {
  const float raw = s.scale * dot(q, k, s.head_dim);
  return s.softcap > 0.0f ? s.softcap * std::tanh(raw / s.softcap) : raw;
}

// Folds one tile of keys into one query row's online softmax state.
void update_row(size_t row, VisibleRange visible, const int32_t* pos, const float* k,
                const float* v, size_t n_keys, const Shape& s, Workspace& w) {
  const size_t d = s.head_dim;
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
  for (size_t t = 0; t < n_keys; ++t) {
    if (w.logits[t] == kNoLogit) continue;
    const float p = std::exp(w.logits[t] - row_max);
    row_sum += p;
    axpy(acc, p, v + t * d, d);
  }
}

void attend_block(const kvc_attend_job& job, const QueryBlock& block, const Shape& s,
                  Workspace& w) {
  const size_t d = s.head_dim;
  const size_t rows = block.count * s.group_size;
  const size_t q_elem = dtype_size(job.q_dtype);

  VisibleRange block_visible{std::numeric_limits<int64_t>::max(),
                             std::numeric_limits<int64_t>::min()};
  for (size_t i = 0; i < block.count; ++i) {
    const VisibleRange visible = visible_range(job.q_pos[block.first + i], s.sliding_window);
    w.visible[i] = visible;
    block_visible.first = std::min(block_visible.first, visible.first);
    block_visible.last = std::max(block_visible.last, visible.last);
    const char* q_token =
        static_cast<const char*>(job.q) + (block.first + i) * job.q_stride * q_elem;
    for (size_t g = 0; g < s.group_size; ++g)
      load_row_f32(q_token + g * d * q_elem, job.q_dtype,
                   w.q.data() + (i * s.group_size + g) * d, d);
  }
  std::fill_n(w.acc.begin(), rows * d, 0.0f);
  std::fill_n(w.row_max.begin(), rows, kNoLogit);
  std::fill_n(w.row_sum.begin(), rows, 0.0f);

  for (int32_t si = 0; si < job.n_segments; ++si) {
    const kvc_segment& segment = job.segments[si];
    for (size_t first = 0; first < size_t(segment.count); first += kTileKeys) {
      const size_t n_keys = std::min(kTileKeys, size_t(segment.count) - first);
      const int32_t* pos = segment.pos + first;
      const auto [lowest, highest] = std::minmax_element(pos, pos + n_keys);
      if (*highest < block_visible.first || *lowest > block_visible.last) continue;
      const float* k = tile_f32(segment.k, first, n_keys, s, w.k.data());
      const float* v = tile_f32(segment.v, first, n_keys, s, w.v.data());
      for (size_t row = 0; row < rows; ++row)
        update_row(row, w.visible[row / s.group_size], pos, k, v, n_keys, s, w);
    }
  }

  for (size_t row = 0; row < rows; ++row) {
    const size_t i = row / s.group_size;
    const size_t g = row % s.group_size;
    float* out = job.out + (block.first + i) * job.out_stride + g * d;
    const float* acc = w.acc.data() + row * d;
    // A row that saw no key keeps row_sum 0 and writes zeros.
    const float inv_sum = w.row_sum[row] > 0.0f ? 1.0f / w.row_sum[row] : 0.0f;
    for (size_t e = 0; e < d; ++e) out[e] = acc[e] * inv_sum;
  }
}

}  // namespace

void run_attend(const kvc_host_api& host, const kvc_attend_job* jobs, size_t n_jobs,
                const kvc_attend_config& given_config) {
  const kvc_attend_config config = read_config(given_config);
  validate(jobs, n_jobs, config);
  const Shape shape = make_shape(config);
  const std::vector<QueryBlock> blocks = split_into_blocks(jobs, n_jobs, shape);
  parallel_for(host, blocks.size(), 1, [&](size_t begin, size_t end) {
    Workspace workspace(shape);
    for (size_t b = begin; b < end; ++b)
      attend_block(jobs[blocks[b].job], blocks[b], shape, workspace);
  });
}

}  // namespace kvc::cpu
