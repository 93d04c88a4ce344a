// kvc-bench fork: fork a --tokens sequence --branches ways and decode --new_tokens divergent
// tokens on every branch (one token per branch per step, all branches in one batch). Prints
// the cost of one fork against one decode attention step over the source, and the memory of
// the branches against as many independent copies of the source fed the same tokens, both
// measured in the same run. The copies are real: a second cache imports the source's export
// once per branch.
#include <algorithm>
#include <limits>
#include <numeric>
#include <random>
#include <vector>

#include "common.hpp"
#include "filled_cache.hpp"
#include "machine.hpp"
#include "report.hpp"
#include "subcommands.hpp"
#include "timer.hpp"

namespace kvc_bench {

const char* const kForkHelp = KVC_BENCH_CACHE_SHAPE_HELP
    "  --branches=N    forks of the source sequence (default 16)\n"
    "  --new_tokens=N  divergent tokens decoded on each branch (default 128)\n"
    "  --reps=N        repeats of the forks and of the attention step; the minimum time\n"
    "                  counts (default 5)\n";

namespace {

kvc_cache_stats stats_of(const kvc_cache* cache) {
  kvc_cache_stats s;
  kvc_cache_stats_init(&s);
  check(kvc_cache_get_stats(cache, &s), "kvc_cache_get_stats");
  return s;
}

// Decode steps appending one token per branch at positions tokens, tokens + 1, ...: every
// branch gets its own random K/V, and both caches get the same.
void decode_divergent(const CacheShape& shape, const std::vector<int32_t>& branches,
                      int32_t new_tokens, kvc_cache* forked, kvc_cache* independent) {
  const size_t rows = branches.size() * static_cast<size_t>(shape.kv_heads) *
                      static_cast<size_t>(shape.head_dim);
  std::vector<float> k(rows), v(rows);
  std::mt19937 rng(static_cast<uint32_t>(shape.seed) + 2);
  std::uniform_real_distribution<float> u(-1.0f, 1.0f);
  const std::vector<int32_t> n_tokens(branches.size(), 1);
  std::vector<int32_t> positions(branches.size());
  kvc_batch batch;
  kvc_batch_init(&batch, static_cast<int32_t>(branches.size()), branches.data(), n_tokens.data(),
                 positions.data());
  const kvc_tensor tk{k.data(), KVC_DTYPE_F32, KVC_DEVICE_HOST, 0};
  const kvc_tensor tv{v.data(), KVC_DTYPE_F32, KVC_DEVICE_HOST, 0};
  for (int32_t step = 0; step < new_tokens; ++step) {
    std::fill(positions.begin(), positions.end(), shape.tokens + step);
    for (int32_t layer = 0; layer < shape.layers; ++layer) {
      for (float& x : k) x = u(rng);
      for (float& x : v) x = u(rng);
      check(kvc_append(forked, layer, &batch, &tk, &tv), "kvc_append (forked)");
      check(kvc_append(independent, layer, &batch, &tk, &tv), "kvc_append (independent)");
    }
  }
}

// One decode step's attention of every branch (one query each, after its last token) on every
// layer; the outputs of all layers.
std::vector<float> attend_branches(const CacheShape& shape, const std::vector<int32_t>& branches,
                                   int32_t position, kvc_cache* cache) {
  const size_t width = static_cast<size_t>(shape.q_heads) * static_cast<size_t>(shape.head_dim);
  std::vector<float> q(branches.size() * width), out(q.size()), all;
  std::mt19937 rng(static_cast<uint32_t>(shape.seed) + 3);
  std::uniform_real_distribution<float> u(-1.0f, 1.0f);
  for (float& x : q) x = u(rng);
  const std::vector<int32_t> n_tokens(branches.size(), 1), positions(branches.size(), position);
  kvc_batch batch;
  kvc_batch_init(&batch, static_cast<int32_t>(branches.size()), branches.data(), n_tokens.data(),
                 positions.data());
  const kvc_tensor tq{q.data(), KVC_DTYPE_F32, KVC_DEVICE_HOST, 0};
  kvc_tensor_mut tout{out.data(), KVC_DTYPE_F32, KVC_DEVICE_HOST, 0};
  for (int32_t layer = 0; layer < shape.layers; ++layer) {
    check(kvc_attend(cache, layer, &batch, &tq, nullptr, &tout), "kvc_attend");
    all.insert(all.end(), out.begin(), out.end());
  }
  return all;
}

}  // namespace

int run_fork(Options& opts) {
  CacheShape shape = CacheShape::read(opts);
  const int32_t n_branches = static_cast<int32_t>(opts.get_int("branches", 16, 1, 4096));
  const int32_t new_tokens = static_cast<int32_t>(opts.get_int("new_tokens", 128, 1, 1 << 20));
  const int reps = static_cast<int>(opts.get_int("reps", 5, 1, 1000));
  opts.reject_unknown();
  report_machine();

  FilledCache filled(shape, nullptr, 0);
  kvc_cache* cache = filled.cache();
  const int32_t source = 0;
  std::vector<int32_t> branches(static_cast<size_t>(n_branches));
  std::iota(branches.begin(), branches.end(), source + 1);

  double attention_s = std::numeric_limits<double>::infinity();
  filled.attend_decode_step();  // warm-up
  for (int rep = 0; rep < reps; ++rep) {
    Timer t;
    filled.attend_decode_step();
    attention_s = std::min(attention_s, t.seconds());
  }
  const size_t bytes_source = stats_of(cache).bytes_used;

  size_t export_size = 0, written = 0;
  check(kvc_seq_export_size(cache, source, &export_size), "kvc_seq_export_size");
  std::vector<unsigned char> image(export_size);
  check(kvc_seq_export(cache, source, image.data(), image.size(), &written), "kvc_seq_export");

  double fork_s = std::numeric_limits<double>::infinity();
  for (int rep = 0; rep < reps; ++rep) {
    if (rep > 0) {
      for (int32_t b : branches) check(kvc_seq_remove(cache, b), "kvc_seq_remove");
    }
    Timer t;
    for (int32_t b : branches) check(kvc_seq_fork(cache, source, b), "kvc_seq_fork");
    fork_s = std::min(fork_s, t.seconds());
  }
  const size_t bytes_after_forks = stats_of(cache).bytes_used;
  // The branches alone are compared with the copies: the source's blocks live on in them.
  check(kvc_seq_remove(cache, source), "kvc_seq_remove");

  kvc_context* context = nullptr;
  check(kvc_context_create(nullptr, &context), "kvc_context_create");
  kvc_cache_params p = shape.params();
  CacheShape grown = shape;
  grown.tokens = shape.tokens + new_tokens;
  // K and V of every copy, with room for positions and partly filled blocks.
  p.memory_limit = static_cast<size_t>(2 * grown.kv_bytes()) * branches.size() + (size_t{64} << 20);
  kvc_cache* independent = nullptr;
  check(kvc_cache_create(context, &p, &independent), "kvc_cache_create");
  for (int32_t b : branches)
    check(kvc_seq_import(independent, b, image.data(), written), "kvc_seq_import");

  decode_divergent(shape, branches, new_tokens, cache, independent);
  const kvc_cache_stats forked_stats = stats_of(cache);
  const kvc_cache_stats independent_stats = stats_of(independent);
  const int32_t next = shape.tokens + new_tokens;
  const bool same = attend_branches(shape, branches, next, cache) ==
                    attend_branches(shape, branches, next, independent);
  kvc_cache_destroy(independent);
  kvc_context_destroy(context);
  if (!same) throw Error("the forked branches' attention differs from the independent copies'");

  shape.report();
  report("branches", n_branches);
  report("new_tokens", new_tokens);
  report("bytes_used_source", bytes_source);
  report("bytes_used_after_forks", bytes_after_forks);
  report("decode_attention_step_seconds", attention_s);
  report("fork_seconds", fork_s);
  report("fork_over_attention", fork_s / n_branches / attention_s);
  report("bytes_used_forked", forked_stats.bytes_used);
  report("bytes_used_independent", independent_stats.bytes_used);
  report("memory_ratio", static_cast<double>(forked_stats.bytes_used) /
                             static_cast<double>(independent_stats.bytes_used));
  report("bytes_shared", forked_stats.bytes_shared);
  report("attention_equal_independent", "yes");
  return 0;
}

}  // namespace kvc_bench
