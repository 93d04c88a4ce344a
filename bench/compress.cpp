// kvc-bench compress: the time to compress a --tokens cache to half (--budget) with a policy,
// against the time of one decode attention step over the same cache, measured in the same
// run. DESIGN.md section 8 targets compress_over_attention <= 1.
#include <algorithm>
#include <limits>
#include <memory>
#include <string>

#include "common.hpp"
#include "cuda/cuda_bench.hpp"
#include "filled_cache.hpp"
#include "machine.hpp"
#include "report.hpp"
#include "subcommands.hpp"
#include "timer.hpp"

namespace kvc_bench {

const char* const kCompressHelp = KVC_BENCH_CACHE_SHAPE_HELP
    "  --policy=NAME   eviction policy (default snapkv)\n"
    "  --budget=N      tokens kept per (layer, KV head) (default: half of --tokens)\n"
    "  --reps=N        repeats; the minimum time counts (default 5)\n";

int run_compress(Options& opts) {
  CacheShape shape = CacheShape::read(opts);
  const std::string policy = opts.get_string("policy", "snapkv");
  const int32_t budget = static_cast<int32_t>(opts.get_int("budget", shape.tokens / 2, 1, shape.tokens));
  const int reps = static_cast<int>(opts.get_int("reps", 5, 1, 1000));
  opts.reject_unknown();
  report_machine();
  // On the device the baseline of attention_bw_fraction is its own copy bandwidth, first.
  double copy_bps = 0;
  if (shape.backend == "cuda") {
    copy_bps = cuda::copy_bytes_per_s(size_t{1} << 30, 5);
    report("device_copy_gbps", copy_bps / 1e9);
  }

  double attention_s = std::numeric_limits<double>::infinity();
  double compress_s = std::numeric_limits<double>::infinity();
  uint64_t evicted = 0;
  for (int rep = 0; rep < reps; ++rep) {
    FilledCache filled(shape, policy.c_str(), budget);
    // Attention before compression: the cache then holds all --tokens tokens.
    for (int i = 0; i < 3; ++i) {
      Timer t;
      filled.attend_decode_step();
      attention_s = std::min(attention_s, t.seconds());
    }
    int32_t seq = 0;
    Timer t;
    check(kvc_compress(filled.cache(), -1, 1, &seq), "kvc_compress");
    compress_s = std::min(compress_s, t.seconds());
    kvc_cache_stats stats{};
    stats.struct_size = sizeof stats;
    check(kvc_cache_get_stats(filled.cache(), &stats), "kvc_cache_get_stats");
    evicted = stats.tokens_evicted;
  }
  const uint64_t expected = static_cast<uint64_t>(shape.tokens - budget) * shape.layers * shape.kv_heads;
  if (evicted != expected) {
    throw Error("compression evicted " + std::to_string(evicted) + " tokens, expected " +
                std::to_string(expected));
  }
  shape.report();
  report("policy", policy);
  report("budget", budget);
  report("kv_bytes", shape.kv_bytes());
  report("tokens_evicted", evicted);
  report("attention_step_seconds", attention_s);
  report("attention_kv_gbps", static_cast<double>(shape.kv_bytes()) / attention_s / 1e9);
  report("compress_seconds", compress_s);
  report("compress_over_attention", compress_s / attention_s);
  if (copy_bps > 0)
    report("attention_bw_fraction", static_cast<double>(shape.kv_bytes()) / attention_s / copy_bps);
  return 0;
}

}  // namespace kvc_bench
