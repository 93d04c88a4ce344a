// The CUDA backend's host-device math (plugins/cuda/device_math.hpp, attend_plan.hpp), run
// on the CPU: conversions against the public header and the reference, and attention built
// from the kernels' own pieces (plan, per-lane-group online softmax over the same key order,
// block and split-K merges, statistics probabilities) against the naive double-precision
// reference. Runs in every build, with or without nvcc.
#include <doctest/doctest.h>

#include <cmath>
#include <cstring>
#include <string>
#include <utility>
#include <vector>

#include "attend_plan.hpp"
#include "device_math.hpp"
#include "kvcache/kvcache_half.h"
#include "reference_attention.hpp"
#include "validation.hpp"

namespace kc = kvc::cuda;

const char* kvc::plugin::plugin_label() { return "cuda backend"; }

namespace {

bool same_float(float a, float b) {
  if (std::isnan(a) || std::isnan(b)) return std::isnan(a) && std::isnan(b);
  return std::memcmp(&a, &b, sizeof a) == 0;
}

// Floats that exercise rounding: random magnitudes across the f16 range and past it, the
// halfway points of f16 and bf16, subnormals, zeros, infinities and NaN.
std::vector<float> conversion_inputs() {
  std::vector<float> values = {0.0f, -0.0f, INFINITY, -INFINITY, NAN, 65504.0f, 65519.0f,
                               65520.0f, 1e-8f, -1e-8f, 5.96e-8f, 2.98e-8f, 6.1e-5f, 1.0f,
                               -1.0f, 3.0e38f};
  ref::Rng rng(7);
  for (int i = 0; i < 200000; ++i) {
    const float mantissa = rng.uniform();
    const int exponent = int(rng.next(60)) - 40;
    values.push_back(std::ldexp(mantissa, exponent));
  }
  for (uint32_t h = 0; h < 0x7c00u; h += 7) {  // f16 halfway points, both signs
    const float low = kvc_f16_to_f32(uint16_t(h)), high = kvc_f16_to_f32(uint16_t(h + 1));
    values.push_back(0.5f * (low + high));
    values.push_back(-0.5f * (low + high));
  }
  return values;
}

}  // namespace

TEST_CASE("cuda math: f16 and bf16 conversions match the public header and the reference") {
  for (uint32_t h = 0; h <= 0xffffu; ++h) {
    CAPTURE(h);
    REQUIRE(same_float(kc::f16_to_f32_bits(uint16_t(h)), kvc_f16_to_f32(uint16_t(h))));
    REQUIRE(same_float(kc::bf16_to_f32(uint16_t(h)), kvc_bf16_to_f32(uint16_t(h))));
  }
  for (float f : conversion_inputs()) {
    CAPTURE(f);
    if (std::isnan(f)) {
      CHECK(std::isnan(kc::f16_to_f32_bits(kc::f32_to_f16_bits(f))));
      CHECK(std::isnan(kc::bf16_to_f32(kc::f32_to_bf16(f))));
      continue;
    }
    REQUIRE(kc::f32_to_f16_bits(f) == ref::f32_to_f16(f));
    REQUIRE(kc::f32_to_f16_bits(f) == kvc_f32_to_f16(f));
    REQUIRE(kc::f32_to_bf16(f) == ref::f32_to_bf16(f));
  }
}

TEST_CASE("cuda math: element conversion between f32 and the storage dtypes") {
  const float src[3] = {1.5f, -0.333333f, 70000.0f};
  // Room for 3 floats: GCC's bounds check also follows the (dead) f32 branch.
  uint16_t half[6];
  float back[3];
  for (int dtype : {kc::kF16, kc::kBF16}) {
    for (size_t i = 0; i < 3; ++i) kc::convert_element(src, kc::kF32, half, dtype, i);
    for (size_t i = 0; i < 3; ++i) kc::convert_element(half, dtype, back, kc::kF32, i);
    for (size_t i = 0; i < 3; ++i) CHECK(same_float(back[i], ref::round_to_dtype(src[i], dtype)));
    uint16_t copy[6];
    for (size_t i = 0; i < 3; ++i) kc::convert_element(half, dtype, copy, dtype, i);
    CHECK(std::memcmp(copy, half, 3 * sizeof(uint16_t)) == 0);
  }
}

TEST_CASE("cuda math: visibility is causal by position with an optional window") {
  CHECK(kc::key_visible(10, 0, 10));
  CHECK(kc::key_visible(10, 0, 0));
  CHECK_FALSE(kc::key_visible(10, 0, 11));
  CHECK(kc::key_visible(10, 3, 8));
  CHECK_FALSE(kc::key_visible(10, 3, 7));
  CHECK(kc::key_visible(10, 1, 10));
  CHECK_FALSE(kc::key_visible(10, 1, 9));
  CHECK(kc::key_visible(INT32_MAX, 2, INT32_MAX - 1));
  CHECK_FALSE(kc::key_visible(INT32_MIN, 0, 0));  // the kernels' unused rows see nothing
  CHECK(std::isinf(kc::final_logit(3.0f, 0.0f, false)));
  CHECK(kc::final_logit(3.0f, 0.0f, true) == 3.0f);
  CHECK(std::fabs(kc::final_logit(30.0f, 5.0f, true) - 5.0f * std::tanh(6.0f)) < 1e-6f);
}

TEST_CASE("cuda math: find_range maps indices to their range, skipping empty ones") {
  const int64_t begins[] = {0, 0, 3, 3, 3, 7, 8};  // ranges of 0, 3, 0, 0, 4, 1 and the rest
  const int32_t expected[] = {1, 1, 1, 4, 4, 4, 4, 5, 6, 6};
  for (int64_t i = 0; i < 10; ++i) CHECK(kc::find_range(begins, 7, i) == expected[i]);
  const int64_t one[] = {0};
  CHECK(kc::find_range(one, 1, 5) == 0);
}

TEST_CASE("cuda math: folding and merging keep softmax states exact") {
  // Three parts of one row, folded key by key in chunks, against a direct softmax.
  const float logits[] = {0.5f, -INFINITY, 2.0f, -1.0f, 3.5f, -INFINITY, 0.0f, 1.25f, -2.0f};
  const float values[] = {1, 2, 3, 4, 5, 6, 7, 8, 9};
  double max = -INFINITY, sum = 0, weighted = 0;
  for (float l : logits) max = std::max(max, double(l));
  for (int i = 0; i < 9; ++i)
    if (!std::isinf(logits[i])) {
      sum += std::exp(logits[i] - max);
      weighted += std::exp(logits[i] - max) * values[i];
    }
  kc::RowState parts[3];
  float acc[3];
  for (int p = 0; p < 3; ++p) {
    parts[p] = kc::empty_row();
    acc[p] = 0;
    for (int c = 0; c < 3; c += 2) {  // chunks of 2 then 1
      const int n = c == 0 ? 2 : 1;
      float w[2];
      const float correction = kc::fold_logits(parts[p], logits + 3 * p + c, n, w);
      acc[p] *= correction;
      for (int i = 0; i < n; ++i) acc[p] += w[i] * values[3 * p + c + i];
    }
  }
  float weights[3];
  const kc::RowState merged = kc::merge_rows(parts, 3, weights);
  double out = 0;
  for (int p = 0; p < 3; ++p) out += weights[p] * acc[p];
  out *= kc::output_factor(merged);
  CHECK(std::fabs(out - weighted / sum) < 1e-5);
  CHECK(std::fabs(kc::probability(merged, 3.5f) - std::exp(3.5 - max) / sum) < 1e-6);
  CHECK(kc::probability(merged, -INFINITY) == 0.0f);
  // A row that saw nothing stays empty through folds and merges, and outputs zeros.
  kc::RowState empty = kc::empty_row();
  const float none[] = {-INFINITY, -INFINITY};
  float w[2];
  CHECK(kc::fold_logits(empty, none, 2, w) == 1.0f);
  CHECK(w[0] == 0.0f);
  kc::RowState two[2] = {kc::empty_row(), kc::empty_row()};
  CHECK(kc::output_factor(kc::merge_rows(two, 2, w)) == 0.0f);
}

TEST_CASE("cuda math: the attend plan covers every row and key once") {
  const std::vector<kc::PlanJob> jobs = {{4, 8192}, {4, 100}, {0, 50}, {1024, 300}, {8, 0}};
  for (int64_t target : {1, 64, 1056, 100000}) {
    CAPTURE(target);
    const kc::AttendPlan plan = kc::plan_attend(jobs, 4, target);
    std::vector<std::vector<int>> covered(jobs.size());
    for (size_t j = 0; j < jobs.size(); ++j)
      covered[j].assign(size_t(jobs[j].n_rows) * size_t(std::max(1, jobs[j].n_keys)), 0);
    int32_t parts = 0;
    for (const kvc::cuda::WorkItem& item : plan.items) {
      CHECK(item.n_rows >= 1);
      CHECK(item.n_rows <= 4);
      if (item.part >= 0) {
        CHECK(item.part == parts);
        ++parts;
        CHECK(item.key_end - item.key_begin >= kc::kMinPartKeys);
      }
      const kc::PlanJob& job = jobs[size_t(item.job)];
      for (int32_t r = item.row_begin; r < item.row_begin + item.n_rows; ++r)
        for (int32_t k = item.key_begin; k < std::max(item.key_end, item.key_begin + (job.n_keys == 0));
             ++k)
          ++covered[size_t(item.job)][size_t(r) * size_t(std::max(1, job.n_keys)) + size_t(k)];
    }
    CHECK(parts == plan.n_parts);
    for (const auto& job : covered)
      for (int c : job) CHECK(c == 1);
    for (const kvc::cuda::SplitRows& split : plan.splits) CHECK(split.n_parts <= kc::kMaxParts);
    if (target == 1) CHECK(plan.splits.empty());
  }
}

namespace {

// One attention job as the kernels see it: segments of stored rows in the storage dtype.
struct Job {
  int head_dim, group, dtype, window;
  float scale, softcap;
  std::vector<std::vector<float>> k, v;  // per segment: [count * head_dim], rounded values
  std::vector<std::vector<int32_t>> pos;
  std::vector<float> q;                   // [n_queries][group][head_dim], unscaled
  std::vector<int32_t> q_pos;
  std::vector<int64_t> begins;
  int32_t n_keys = 0;
};

// The kernels' walk (attend.cu): lanes_per_key, warps over contiguous key ranges, lane groups
// interleaved within, kUnroll keys folded at a time, then the block merge and the split-K
// merge, all through device_math.hpp. out: [rows][head_dim]; rows: final states.
void emulate(const Job& job, int64_t target_blocks, std::vector<float>& out,
             std::vector<kc::RowState>& rows) {
  const int D = job.head_dim, elems = job.dtype == kc::kF32 ? 4 : 8;
  const int n_chunks = (D + elems - 1) / elems;
  int lanes = 1;
  while (lanes < n_chunks && lanes < 32) lanes *= 2;
  int cpl = 1;
  while (lanes * cpl < n_chunks) cpl *= 2;
  const int rows_per_item = cpl == 1 ? 4 : cpl == 2 ? 2 : 1;
  const int unroll = rows_per_item;
  const size_t keys_per_fold = size_t(unroll);
  const int slots = 32 / lanes, warps = 4;
  const size_t dim = size_t(D);
  const int32_t n_rows = int32_t(job.q_pos.size()) * job.group;
  const kc::AttendPlan plan = kc::plan_attend({{n_rows, job.n_keys}}, rows_per_item, target_blocks);
  std::vector<float> part_acc(size_t(plan.n_parts) * rows_per_item * D);
  std::vector<kc::RowState> part_rows(size_t(plan.n_parts) * rows_per_item);
  out.assign(size_t(n_rows) * D, 0.0f);
  rows.assign(size_t(n_rows), kc::empty_row());
  for (const kc::WorkItem& item : plan.items) {
    for (int r = 0; r < item.n_rows; ++r) {
      const int32_t row = item.row_begin + r;
      const int32_t query = row / job.group;
      std::vector<kc::RowState> states;
      std::vector<std::vector<float>> accs;
      for (int warp = 0; warp < warps; ++warp) {
        const int32_t n = item.key_end - item.key_begin;
        const int32_t first = item.key_begin + int32_t(int64_t(n) * warp / warps);
        const int32_t end = item.key_begin + int32_t(int64_t(n) * (warp + 1) / warps);
        for (int slot = 0; slot < slots; ++slot) {
          kc::RowState state = kc::empty_row();
          std::vector<float> acc(dim, 0.0f);
          for (int32_t base = first; base < end; base += slots * unroll) {
            std::vector<float> logits(keys_per_fold), weights(keys_per_fold);
            std::vector<const float*> v_rows(keys_per_fold, nullptr);
            for (int u = 0; u < unroll; ++u) {
              const int32_t key = base + u * slots + slot;
              if (key >= end) {
                logits[size_t(u)] = -INFINITY;
                continue;
              }
              const int32_t s = kc::find_range(job.begins.data(), int32_t(job.begins.size()), key);
              const int64_t local = key - job.begins[size_t(s)];
              const float* k = job.k[size_t(s)].data() + local * D;
              v_rows[size_t(u)] = job.v[size_t(s)].data() + local * D;
              float dot = 0.0f;
              for (int d = 0; d < D; ++d) dot += job.q[size_t(row) * D + d] * job.scale * k[d];
              logits[size_t(u)] = kc::final_logit(
                  dot, job.softcap,
                  kc::key_visible(job.q_pos[size_t(query)], job.window, job.pos[size_t(s)][size_t(local)]));
            }
            const float correction = kc::fold_logits(state, logits.data(), unroll, weights.data());
            for (float& a : acc) a *= correction;
            for (int u = 0; u < unroll; ++u)
              if (v_rows[size_t(u)])
                for (int d = 0; d < D; ++d) acc[size_t(d)] += weights[size_t(u)] * v_rows[size_t(u)][d];
          }
          states.push_back(state);
          accs.push_back(acc);
        }
      }
      std::vector<float> w(states.size());
      const kc::RowState merged = kc::merge_rows(states.data(), int(states.size()), w.data());
      std::vector<float> sum(dim, 0.0f);
      for (size_t p = 0; p < states.size(); ++p)
        for (int d = 0; d < D; ++d) sum[size_t(d)] += w[p] * accs[p][size_t(d)];
      if (item.part < 0) {
        for (int d = 0; d < D; ++d)
          out[size_t(row) * D + d] = sum[size_t(d)] * kc::output_factor(merged);
        rows[size_t(row)] = merged;
      } else {
        std::copy(sum.begin(), sum.end(), part_acc.begin() + (size_t(item.part) * rows_per_item + r) * D);
        part_rows[size_t(item.part) * rows_per_item + r] = merged;
      }
    }
  }
  for (const kc::SplitRows& split : plan.splits) {
    for (int r = 0; r < split.n_rows; ++r) {
      std::vector<kc::RowState> states;
      for (int p = 0; p < split.n_parts; ++p)
        states.push_back(part_rows[size_t(split.first_part + p) * rows_per_item + r]);
      std::vector<float> w(states.size());
      const kc::RowState merged = kc::merge_rows(states.data(), split.n_parts, w.data());
      const int32_t row = split.row_begin + r;
      for (int d = 0; d < D; ++d) {
        float sum = 0;
        for (int p = 0; p < split.n_parts; ++p)
          sum += w[size_t(p)] * part_acc[(size_t(split.first_part + p) * rows_per_item + r) * D + d];
        out[size_t(row) * D + d] = sum * kc::output_factor(merged);
      }
      rows[size_t(row)] = merged;
    }
  }
}

// A job of n_keys keys in segments of `block` tokens (positions with gaps), and n_queries
// queries at the last positions; the reference history gets the same rounded values.
Job make_job(int D, int group, int dtype, int n_keys, int block, int n_queries, int window,
             float softcap, uint32_t seed, ref::History& hist) {
  ref::Rng rng(seed);
  Job job{D, group, dtype, window, 1.0f / std::sqrt(float(D)), softcap, {}, {}, {}, {}, {}, {}, n_keys};
  hist = ref::History(1, D);
  const size_t dim = size_t(D);
  int32_t p = 0;
  for (int key = 0; key < n_keys; key += block) {
    const int count = std::min(block, n_keys - key);
    job.begins.push_back(key);
    job.k.emplace_back();
    job.v.emplace_back();
    job.pos.emplace_back();
    for (int t = 0; t < count; ++t) {
      std::vector<float> k(dim), v(dim);
      for (float& x : k) x = ref::round_to_dtype(rng.uniform() * 2.0f, dtype);
      for (float& x : v) x = ref::round_to_dtype(rng.uniform(), dtype);
      job.k.back().insert(job.k.back().end(), k.begin(), k.end());
      job.v.back().insert(job.v.back().end(), v.begin(), v.end());
      job.pos.back().push_back(p);
      hist.append(p, k.data(), v.data());
      p += 1 + int32_t(rng.next(3) == 0);  // some gaps
    }
  }
  for (int i = 0; i < n_queries; ++i) job.q_pos.push_back(p - n_queries + i);
  job.q = rng.vec(size_t(n_queries) * group * D);
  for (float& x : job.q) x *= 2.0f;
  return job;
}

}  // namespace

TEST_CASE("cuda math: attention from the kernels' pieces matches the double reference") {
  struct Case {
    int D, group, dtype, keys, block, queries, window;
    float softcap;
    int64_t target;
  };
  const Case cases[] = {
      {128, 4, kc::kF16, 3000, 16, 1, 0, 0.0f, 1056},   // decode, split-K
      {128, 4, kc::kBF16, 3000, 16, 1, 0, 0.0f, 1},     // decode, one part
      {40, 4, kc::kF16, 700, 5, 6, 0, 0.0f, 64},        // prefill chunk, odd blocks
      {64, 2, kc::kF32, 900, 1, 3, 7, 5.0f, 1056},      // window + soft-cap, split
      {8, 8, kc::kBF16, 300, 16, 4, 20, 1.0f, 8},       // small rows, many lanes per key
      {4, 1, kc::kF16, 50, 5, 5, 0, 0.0f, 1},           // a partial chunk
      {256, 1, kc::kF32, 600, 16, 2, 0, 0.0f, 1056},    // two chunks per lane
      {1024, 2, kc::kF32, 520, 16, 1, 0, 0.0f, 1056},   // eight chunks per lane
      {1024, 2, kc::kF16, 300, 16, 2, 100, 0.0f, 4},    // four chunks per lane, window
  };
  for (const Case& c : cases) {
    CAPTURE(c.D);
    CAPTURE(c.dtype);
    CAPTURE(c.keys);
    CAPTURE(c.window);
    ref::History hist;
    const Job job = make_job(c.D, c.group, c.dtype, c.keys, c.block, c.queries, c.window,
                             c.softcap, uint32_t(c.D * 31 + c.keys), hist);
    std::vector<float> out;
    std::vector<kc::RowState> rows;
    emulate(job, c.target, out, rows);
    ref::Options options;
    options.window = c.window;
    options.softcap = c.softcap;
    const double tolerance = c.dtype == kc::kF32 ? 1e-5 : 2e-3;  // as the C API suites
    double worst = 0;
    for (int i = 0; i < c.queries; ++i) {
      std::vector<double> expected(size_t(c.group) * c.D);
      ref::attend(hist, c.group, job.q.data() + size_t(i) * c.group * c.D, job.q_pos[size_t(i)],
                  options, expected.data());
      for (size_t e = 0; e < expected.size(); ++e)
        worst = std::max(worst, std::fabs(expected[e] - out[size_t(i) * c.group * c.D + e]));
    }
    CHECK(worst <= tolerance);
    // The statistics kernel's probabilities (from the rows' final states) sum to 1 per row
    // over the keys the row sees.
    for (int32_t row = 0; row < int32_t(rows.size()); ++row) {
      const int32_t query = row / c.group;
      double total = 0;
      for (size_t s = 0; s < job.k.size(); ++s)
        for (size_t t = 0; t < job.pos[s].size(); ++t) {
          float dot = 0;
          for (int d = 0; d < c.D; ++d)
            dot += job.q[size_t(row) * c.D + d] * job.scale * job.k[s][t * c.D + d];
          const bool visible = kc::key_visible(job.q_pos[size_t(query)], c.window, job.pos[s][t]);
          total += kc::probability(rows[size_t(row)], kc::final_logit(dot, c.softcap, visible));
        }
      CHECK(std::fabs(total - 1.0) < 1e-4);
    }
  }
}

TEST_CASE("cuda math: statistics targets of each query") {
  // 5 queries, window 2: all feed attn_sum, the last attn_last, the last two attn_window.
  for (int32_t q = 0; q < 5; ++q) {
    const kc::StatTargets t = kc::stat_targets(q, 5, 2);
    CHECK(t.last == (q == 4));
    CHECK(t.window == (q >= 3));
  }
  CHECK_FALSE(kc::stat_targets(0, 5, 0).window);
  CHECK(kc::stat_targets(0, 1, 9).window);
}

TEST_CASE("cuda math: rows longer than the kernels serve are refused, not cut short") {
  CHECK_NOTHROW(kc::check_storage(1024, KVC_DTYPE_F32, KVC_DTYPE_F32));
  CHECK_NOTHROW(kc::check_storage(2048, KVC_DTYPE_F16, KVC_DTYPE_F16));
  CHECK_NOTHROW(kc::check_storage(2048, KVC_DTYPE_BF16, KVC_DTYPE_BF16));
  const std::pair<int32_t, kvc_dtype> too_long[] = {
      {1025, KVC_DTYPE_F32}, {2049, KVC_DTYPE_F16}, {2056, KVC_DTYPE_BF16}};
  for (const auto& [head_dim, dtype] : too_long) {
    CAPTURE(head_dim);
    try {
      kc::check_storage(head_dim, dtype, dtype);
      FAIL("accepted");
    } catch (const kvc::Error& e) {
      CHECK(e.code() == KVC_ERR_UNSUPPORTED);
      CHECK(std::string(e.what()).find(std::to_string(head_dim)) != std::string::npos);
    }
  }
}

TEST_CASE("cuda math: K and V of different formats are refused, naming both") {
  try {
    kc::check_storage(64, KVC_DTYPE_F16, KVC_DTYPE_F32);
    FAIL("accepted");
  } catch (const kvc::Error& e) {
    CHECK(e.code() == KVC_ERR_UNSUPPORTED);
    CHECK(std::string(e.what()).find(
              "the cuda backend stores K and V in one format, not K as f16 and V as f32") !=
          std::string::npos);
  }
}
