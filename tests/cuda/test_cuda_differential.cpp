// The cuda backend against the cpu backend on the same inputs: every prefill chunk's and
// decode step's attention output, then the attention statistics the policy is handed, over
// head_dim {64, 80, 96, 128, 256}, GQA groups {1, 4, 8}, f32/f16/bf16 storage and blocks of
// 16 and 256 tokens. Run through run_if_device.sh, so it reports SKIPPED without a device.
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <map>
#include <random>
#include <string>
#include <vector>

#include "kvcache/kvcache.h"
#include "stats_probe.hpp"
#include "test_support.hpp"

namespace {

struct Shape {
  int head_dim;
  int group;
  kvc_dtype dtype;
  int block_tokens;
};

constexpr int kKvHeads = 2;
constexpr int kDecodeSteps = 3;
const std::vector<int32_t> kSeqs = {1, 2, 3};
// Each sequence's prompt chunks; the second chunk of sequence 2 and the decode steps meet
// cached keys, sequence 3's 700 keys span blocks and split across key ranges.
const std::vector<std::vector<int32_t>> kChunks = {{5}, {64, 64}, {700}};

double tolerance(kvc_dtype dtype) { return dtype == KVC_DTYPE_F32 ? 1e-5 : 2e-3; }


kvt::CachePtr make_side(kvc_context* ctx, const char* backend, const Shape& s) {
  kvc_cache_params p;
  kvc_cache_params_init(&p);
  p.kv_heads = kKvHeads;
  p.q_heads = kKvHeads * s.group;
  p.head_dim = s.head_dim;
  p.dtype = s.dtype;
  p.block_tokens = s.block_tokens;
  p.backend = backend;
  p.policy = "stats_probe";
  p.budget = 1;
  kvc_key_value params[] = {{"stats", "7"}, {"window", "4"}};
  p.policy_params = params;
  p.n_policy_params = 2;
  kvt::CachePtr cache = kvt::make_cache(ctx, p);
  for (int32_t id : kSeqs) KVT_REQUIRE_OK(kvc_seq_create(cache.get(), id));
  return cache;
}

std::vector<float> random_rows(std::mt19937& rng, size_t n) {
  std::uniform_real_distribution<float> u(-1.0f, 1.0f);
  std::vector<float> v(n);
  for (float& x : v) x = u(rng);
  return v;
}

struct Worst {
  double output = 0.0;
  double stats = 0.0;
};

// One step on both caches: the listed sequences get ntok new tokens each; returns the largest
// difference between the two outputs.
double step_both(kvc_cache* cpu, kvc_cache* cuda, const Shape& s, std::mt19937& rng,
                 std::map<int32_t, int32_t>& next_pos, const std::vector<int32_t>& seqs,
                 const std::vector<int32_t>& ntok) {
  std::vector<int32_t> positions;
  for (size_t i = 0; i < seqs.size(); ++i)
    for (int32_t t = 0; t < ntok[i]; ++t) positions.push_back(next_pos[seqs[i]]++);
  const size_t total = positions.size();
  const size_t d = size_t(s.head_dim);
  const size_t q_width = size_t(kKvHeads * s.group) * d;
  const std::vector<float> q = random_rows(rng, total * q_width);
  const std::vector<float> k = random_rows(rng, total * kKvHeads * d);
  const std::vector<float> v = random_rows(rng, total * kKvHeads * d);
  kvc_batch batch;
  kvc_batch_init(&batch, int32_t(seqs.size()), seqs.data(), ntok.data(), positions.data());
  const kvc_tensor qt = kvt::tensor(q.data(), KVC_DTYPE_F32);
  const kvc_tensor kt = kvt::tensor(k.data(), KVC_DTYPE_F32);
  const kvc_tensor vt = kvt::tensor(v.data(), KVC_DTYPE_F32);
  kvc_attention_params params;
  kvc_attention_params_init(&params);
  std::vector<float> out_cpu(total * q_width), out_cuda(total * q_width, NAN);
  kvc_tensor_mut oc = kvt::tensor_mut(out_cpu.data());
  kvc_tensor_mut og = kvt::tensor_mut(out_cuda.data());
  KVT_REQUIRE_OK(kvc_append_attend(cpu, 0, &batch, &qt, &kt, &vt, &params, &oc));
  KVT_REQUIRE_OK(kvc_append_attend(cuda, 0, &batch, &qt, &kt, &vt, &params, &og));
  double worst = 0.0;
  for (size_t i = 0; i < out_cpu.size(); ++i) {
    const double diff = std::fabs(double(out_cpu[i]) - double(out_cuda[i]));
    worst = std::isnan(diff) ? INFINITY : std::max(worst, diff);
  }
  return worst;
}

// The statistics each cache hands its policy for one sequence (layer 0, every KV head);
// returns the largest relative difference.
double compare_stats(kvc_cache* cpu, kvc_cache* cuda, int32_t seq) {
  kvt::ProbeRead read = kvt::probe_reader();
  std::vector<std::vector<float>> seen_cpu, seen_cuda;
  std::vector<std::vector<int32_t>> pos_cpu, pos_cuda;
  for (kvc_cache* cache : {cpu, cuda}) {
    KVT_REQUIRE_OK(kvc_compress(cache, 0, 1, &seq));
    auto& seen = cache == cpu ? seen_cpu : seen_cuda;
    auto& pos = cache == cpu ? pos_cpu : pos_cuda;
    for (int h = 0; h < kKvHeads; ++h) {
      for (int which = 0; which < 3; ++which) {
        const int32_t* p = nullptr;
        const float* values = nullptr;
        const int32_t n = read(0, h, which, &p, &values);
        seen.emplace_back(values, values + n);
        pos.emplace_back(p, p + n);
      }
    }
  }
  double worst = 0.0;
  for (size_t i = 0; i < seen_cpu.size(); ++i) {
    CAPTURE(i);
    REQUIRE(pos_cpu[i] == pos_cuda[i]);
    REQUIRE(seen_cpu[i].size() == seen_cuda[i].size());
    for (size_t t = 0; t < seen_cpu[i].size(); ++t) {
      const double a = seen_cpu[i][t], b = seen_cuda[i][t];
      const double diff = std::fabs(a - b) / (1.0 + std::fabs(a));
      worst = std::isnan(diff) ? INFINITY : std::max(worst, diff);
    }
  }
  return worst;
}

// Both caches through every step of one shape; returns the largest differences.
Worst compare_shape(kvc_context* ctx, const Shape& s) {
  CAPTURE(s.head_dim);
  CAPTURE(s.group);
  CAPTURE(kvc_dtype_name(s.dtype));
  CAPTURE(s.block_tokens);
  kvt::CachePtr cpu = make_side(ctx, "cpu", s);
  kvt::CachePtr cuda = make_side(ctx, "cuda", s);
  std::mt19937 rng(uint32_t(s.head_dim * 1000 + s.group * 10 + s.block_tokens));
  std::map<int32_t, int32_t> next_pos{{1, 0}, {2, 40}, {3, 7}};
  Worst worst;
  for (size_t chunk = 0; chunk < 2; ++chunk) {
    std::vector<int32_t> seqs, ntok;
    for (size_t i = 0; i < kSeqs.size(); ++i) {
      if (chunk >= kChunks[i].size()) continue;
      seqs.push_back(kSeqs[i]);
      ntok.push_back(kChunks[i][chunk]);
    }
    worst.output =
        std::max(worst.output, step_both(cpu.get(), cuda.get(), s, rng, next_pos, seqs, ntok));
  }
  const std::vector<int32_t> one_each(kSeqs.size(), 1);
  for (int t = 0; t < kDecodeSteps; ++t)
    worst.output =
        std::max(worst.output, step_both(cpu.get(), cuda.get(), s, rng, next_pos, kSeqs, one_each));
  CHECK(worst.output <= tolerance(s.dtype));
  for (int32_t seq : kSeqs)
    worst.stats = std::max(worst.stats, compare_stats(cpu.get(), cuda.get(), seq));
  CHECK(worst.stats <= 1e-4);
  return worst;
}

// Every shape, printing the largest differences of each dtype as name=value lines.
void compare_shapes(const std::vector<int>& head_dims, const std::vector<int>& groups,
                    const std::vector<int>& block_sizes) {
  kvt::ContextPtr ctx = kvt::make_context(kvt::probe_yaml().c_str());
  std::map<kvc_dtype, Worst> worst;
  int shapes = 0;
  for (int head_dim : head_dims) {
    for (int group : groups) {
      for (kvc_dtype dtype : {KVC_DTYPE_F32, KVC_DTYPE_F16, KVC_DTYPE_BF16}) {
        for (int block_tokens : block_sizes) {
          const Worst w = compare_shape(ctx.get(), Shape{head_dim, group, dtype, block_tokens});
          worst[dtype].output = std::max(worst[dtype].output, w.output);
          worst[dtype].stats = std::max(worst[dtype].stats, w.stats);
          ++shapes;
        }
      }
    }
  }
  for (const auto& [dtype, w] : worst)
    std::printf("differential_%s_max_output_diff=%.3g differential_%s_max_stats_rel_diff=%.3g\n",
                kvc_dtype_name(dtype), w.output, kvc_dtype_name(dtype), w.stats);
  std::printf("differential_shapes=%d\n", shapes);
}

}  // namespace

TEST_CASE("differential: the cuda backend's attention and statistics equal the cpu backend's") {
  compare_shapes({64, 80, 96, 128, 256}, {1, 4, 8}, {16, 256});
}

// One shape per dtype, short enough for compute-sanitizer (the device kit's memcheck step).
TEST_CASE("differential (short): one shape per dtype") { compare_shapes({128}, {4}, {16}); }
