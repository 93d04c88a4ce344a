// kvc-bench attention: the CPU kernels against the machine's limits, measured in the same run
// (DESIGN.md section 8); --backend cuda runs bench/cuda's device version instead. Decode attention over a --tokens cache as a fraction of read
// bandwidth and of the roofline (read bandwidth or the multiply-add rate, the lower), append
// of a prefill chunk for a batch of sequences as a fraction of memcpy bandwidth, and the
// GFLOP/s of a prefill chunk's attention.
#include <algorithm>
#include <limits>
#include <numeric>
#include <random>
#include <thread>
#include <vector>

#include "attention_cold.hpp"
#include "bandwidth.hpp"
#include "common.hpp"
#include "compute_peak.hpp"
#include "cuda/cuda_bench.hpp"
#include "filled_cache.hpp"
#include "kvcache/kvcache_format.h"
#include "machine.hpp"
#include "report.hpp"
#include "subcommands.hpp"
#include "timer.hpp"

namespace kvc_bench {

const char* const kAttentionHelp = KVC_BENCH_CACHE_SHAPE_HELP
    "  --chunk=N       prefill chunk: tokens appended per sequence, queries attended (default "
    "256)\n"
    "  --batch=N       sequences appended at once (default 32)\n"
    "  --reps=N        repeats of decode and append; the minimum time counts (default 20)\n"
    "  --prefill_reps=N  repeats of the prefill chunk's attention (default 3)\n"
    "  --decode_batch=N  sequences of the batched decode shape (default 8)\n"
    "  --threads=N     threads of the library's arena and of the bandwidth baseline (default 0:\n"
    "                  all cores)\n"
    "  --cold_mib=N    K/V of the sets rotated for the cold figures, and size of the bandwidth\n"
    "                  baseline's buffer (default 1024)\n"
    "Decode attention is measured cold and warm on two shapes: `batch` (decode_batch sequences\n"
    "of --tokens on one layer) and `single` (one sequence on every layer). Cold: as many\n"
    "independent caches of that shape as hold --cold_mib of K/V, one decode step per cache in\n"
    "turn, so every step reads its K/V from memory; warm: one cache again and again. Each is\n"
    "a fraction of the read bandwidth (a vectorised sum on the same threads over --cold_mib)\n"
    "measured in the same run. The last line, attention_bw_fraction, is the cold batch figure.\n"
    "The compute ceiling: decode does 2 q_heads/kv_heads head_dim multiply-adds per token's K\n"
    "and V rows, 2 q_heads/kv_heads / (K and V bytes per value) per byte\n"
    "(attention_macs_per_kv_byte), so the f32 FMA rate of the widest vector FMA, measured on the\n"
    "same threads (fma_gflops), caps it at attention_compute_bound_kv_gbps. Where that is below\n"
    "read_gbps, attention_bw_fraction cannot pass their ratio whatever the kernel does, and\n"
    "attention_roofline_fraction (the cold batch figure over min(read, compute bound)) says how\n"
    "close the kernel comes to the ceiling that binds. attention_batch_cold_paired_fraction\n"
    "pairs each cold batch pass with a read pass run just before it and gives the median of\n"
    "their ratios: on a VM whose bandwidth or core placement moves within a run, the best\n"
    "times above may come from different moments.\n"
    "attention_<shape>_host_seconds: the warm step again with a one-key sliding window, so\n"
    "next to no K/V is read: what a call costs whatever it reads (job and segment lists,\n"
    "dispatch); host_share_of_warm is its share of the warm step.\n"
    "With a quantized K or V format (q8_0, q4_0) the cold batch shape also runs in f16 in the\n"
    "same run: attention_f16_batch_cold_kv_gbps, attention_f16_roofline_fraction and\n"
    "attention_decode_cold_vs_f16 (f16's cold step time over the format's: above 1, the format\n"
    "decodes faster). K/V bytes per second and attention_roofline_fraction count the format's\n"
    "bytes, scales included.\n";

namespace {

constexpr double kInfinity = std::numeric_limits<double>::infinity();

// One kvc_append of `chunk` new tokens to each of `batch` sequences, on every layer: the
// seconds of the fastest rep. Storage is reserved before the clock starts, and the blocks of
// a rep are recycled by the next, so page faults stay out of all but the first.
double time_append(const CacheShape& shape, int32_t batch, int32_t chunk, int reps) {
  kvc_context* context = nullptr;
  check(kvc_context_create(nullptr, &context), "kvc_context_create");
  kvc_cache_params p = shape.params();
  CacheShape stored = shape;
  stored.tokens = chunk;
  p.memory_limit = static_cast<size_t>(stored.kv_bytes() * 2 * batch + (size_t{64} << 20));
  kvc_cache* cache = nullptr;
  check(kvc_cache_create(context, &p, &cache), "kvc_cache_create");

  // Source rows in the storage format, so that append is a pure scatter of bytes (in f16 for
  // a quantized format, which the append quantizes).
  const kvc_dtype k_input = input_dtype_for(shape.formats.k);
  const kvc_dtype v_input = input_dtype_for(shape.formats.v);
  const size_t rows = static_cast<size_t>(batch) * static_cast<size_t>(chunk);
  const size_t row = static_cast<size_t>(shape.kv_heads) * static_cast<size_t>(shape.head_dim);
  std::vector<unsigned char> k(kvc_format_row_bytes(k_input, rows * row));
  std::vector<unsigned char> v(kvc_format_row_bytes(v_input, rows * row));
  std::mt19937 rng(static_cast<uint32_t>(shape.seed));
  std::uniform_real_distribution<float> u(-1.0f, 1.0f);
  std::vector<float> values(rows * row);
  for (float& x : values) x = u(rng);
  convert_from_f32(values.data(), k.data(), values.size(), k_input);
  for (float& x : values) x = u(rng);
  convert_from_f32(values.data(), v.data(), values.size(), v_input);

  std::vector<int32_t> seq_ids(static_cast<size_t>(batch));
  std::iota(seq_ids.begin(), seq_ids.end(), 0);
  const std::vector<int32_t> n_tokens(seq_ids.size(), chunk);
  std::vector<int32_t> positions(rows);
  for (size_t i = 0; i < rows; ++i)
    positions[i] = static_cast<int32_t>(i % static_cast<size_t>(chunk));
  kvc_batch b;
  kvc_batch_init(&b, batch, seq_ids.data(), n_tokens.data(), positions.data());
  const kvc_tensor tk{k.data(), k_input, KVC_DEVICE_HOST, 0};
  const kvc_tensor tv{v.data(), v_input, KVC_DEVICE_HOST, 0};

  double best = kInfinity;
  for (int rep = 0; rep < reps + 1; ++rep) {  // rep 0 touches the pages
    for (int32_t s : seq_ids) {
      check(kvc_seq_create(cache, s), "kvc_seq_create");
      check(kvc_seq_reserve(cache, s, chunk), "kvc_seq_reserve");
    }
    Timer t;
    for (int32_t layer = 0; layer < shape.layers; ++layer)
      check(kvc_append(cache, layer, &b, &tk, &tv), "kvc_append");
    if (rep > 0) best = std::min(best, t.seconds());
    for (int32_t s : seq_ids) check(kvc_seq_remove(cache, s), "kvc_seq_remove");
  }
  kvc_cache_destroy(cache);
  kvc_context_destroy(context);
  return best;
}

// Attention of the last `chunk` tokens' queries of the filled sequence (positions
// tokens - chunk .. tokens - 1, causal) on every layer: the seconds of the fastest rep.
double time_prefill(const CacheShape& shape, FilledCache& filled, int32_t chunk, int reps) {
  const size_t width = static_cast<size_t>(shape.q_heads) * static_cast<size_t>(shape.head_dim);
  std::vector<float> q(static_cast<size_t>(chunk) * width), out(q.size());
  std::mt19937 rng(static_cast<uint32_t>(shape.seed) + 1);
  std::uniform_real_distribution<float> u(-1.0f, 1.0f);
  for (float& x : q) x = u(rng);
  std::vector<int32_t> positions(static_cast<size_t>(chunk));
  for (int32_t i = 0; i < chunk; ++i) positions[static_cast<size_t>(i)] = shape.tokens - chunk + i;
  int32_t seq = 0;
  kvc_batch batch;
  kvc_batch_init(&batch, 1, &seq, &chunk, positions.data());
  const kvc_tensor tq{q.data(), KVC_DTYPE_F32, KVC_DEVICE_HOST, 0};
  kvc_tensor_mut tout{out.data(), KVC_DTYPE_F32, KVC_DEVICE_HOST, 0};
  double best = kInfinity;
  for (int rep = 0; rep < reps; ++rep) {
    Timer t;
    for (int32_t layer = 0; layer < shape.layers; ++layer)
      check(kvc_attend(filled.cache(), layer, &batch, &tq, nullptr, &tout), "kvc_attend");
    best = std::min(best, t.seconds());
  }
  return best;
}

// Multiply-adds of QK^T and PV: 4 * head_dim flops per (query head, visible key).
double prefill_flops(const CacheShape& shape, int32_t chunk) {
  double keys = 0;
  for (int32_t i = 0; i < chunk; ++i) keys += shape.tokens - chunk + i + 1;
  return 4.0 * shape.head_dim * keys * shape.q_heads * shape.layers;
}

}  // namespace

int run_attention(Options& opts) {
  CacheShape shape = CacheShape::read(opts);
  const int32_t chunk = static_cast<int32_t>(opts.get_int("chunk", 256, 1, shape.tokens));
  const int32_t batch = static_cast<int32_t>(opts.get_int("batch", 32, 1, 4096));
  const int32_t decode_batch = static_cast<int32_t>(opts.get_int("decode_batch", 8, 1, 4096));
  const int reps = static_cast<int>(opts.get_int("reps", 20, 1, 1000));
  const int prefill_reps = static_cast<int>(opts.get_int("prefill_reps", 3, 1, 1000));
  const int requested_threads = static_cast<int>(opts.get_int("threads", 0, 0, 4096));
  const uint64_t cold_bytes =
      static_cast<uint64_t>(opts.get_int("cold_mib", 1024, 1, int64_t{1} << 20)) << 20;
  opts.reject_unknown();
  if (shape.backend == "cuda") return cuda::run_attention(shape, batch, chunk, reps, prefill_reps);
  report_machine();

  // The library's arena and the baseline use the same threads: all cores unless --threads.
  const int threads = requested_threads > 0
                          ? requested_threads
                          : static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  const Bandwidth bw = measure_bandwidth(static_cast<size_t>(cold_bytes), threads);
  const ComputePeak peak = measure_compute_peak(threads);

  // Cold and warm decode over two shapes: a batch of decode_batch sequences on one layer, and
  // one sequence on every layer (the shape of the warm figures before).
  CacheShape one_layer = shape;
  one_layer.layers = 1;
  BaselinePasses paired(static_cast<size_t>(cold_bytes), threads);
  const DecodeTimes batched =
      time_decode(one_layer, decode_batch, cold_bytes, threads, reps, &paired);
  // A quantized format's speed against f16's on the same shape, measured right after it.
  CacheShape one_layer_f16 = one_layer;
  one_layer_f16.formats = KvFormats{};
  const bool against_f16 = shape.formats.quantized();
  const DecodeTimes batched_f16 =
      against_f16 ? time_decode(one_layer_f16, decode_batch, cold_bytes, threads, reps)
                  : DecodeTimes{};
  const DecodeTimes single = time_decode(shape, 1, cold_bytes, threads, reps);

  FilledCache filled(shape, nullptr, 0, 1, threads);
  const double prefill_s = time_prefill(shape, filled, chunk, prefill_reps);
  const double append_s = time_append(shape, batch, chunk, reps);

  CacheShape appended = shape;
  appended.tokens = chunk;
  const double append_bps = static_cast<double>(appended.kv_bytes()) * batch / append_s;
  shape.report();
  report("chunk", chunk);
  report("batch", batch);
  report("decode_batch", decode_batch);
  report("threads", threads);
  report_bandwidth(bw);
  auto report_decode = [&](const char* name, const DecodeTimes& t) {
    const std::string prefix = std::string("attention_") + name + "_";
    const double cold_bps = static_cast<double>(t.set_bytes) / t.cold_seconds;
    const double warm_bps = static_cast<double>(t.set_bytes) / t.warm_seconds;
    report(prefix + "set_bytes", t.set_bytes);
    report(prefix + "sets", t.sets);
    report(prefix + "cold_seconds", t.cold_seconds);
    report(prefix + "cold_kv_gbps", cold_bps / 1e9);
    report(prefix + "cold_fraction_of_read_bw", cold_bps / bw.read_bytes_per_s);
    report(prefix + "warm_seconds", t.warm_seconds);
    report(prefix + "warm_kv_gbps", warm_bps / 1e9);
    report(prefix + "warm_fraction_of_read_bw", warm_bps / bw.read_bytes_per_s);
    report(prefix + "host_seconds", t.host_seconds);
    report(prefix + "host_share_of_warm", t.host_seconds / t.warm_seconds);
  };
  report_decode("batch", batched);
  report_decode("single", single);
  report("kv_bytes", shape.kv_bytes());
  report("decode_attention_seconds", single.warm_seconds);
  report("decode_attention_kv_gbps", static_cast<double>(single.set_bytes) / single.warm_seconds / 1e9);
  report("prefill_attention_seconds", prefill_s);
  report("prefill_attention_gflops", prefill_flops(shape, chunk) / prefill_s / 1e9);
  report("append_seconds", append_s);
  report("append_gbps", append_bps / 1e9);
  report("decode_attention_fraction_of_read_bw",
         static_cast<double>(single.set_bytes) / single.warm_seconds / bw.read_bytes_per_s);
  report("append_fraction_of_memcpy_bw", append_bps / bw.memcpy_bytes_per_s);
  const DecodeRoofline roofline = decode_roofline(shape, bw.read_bytes_per_s, peak.fma_per_s);
  const double batch_cold_bps = static_cast<double>(batched.set_bytes) / batched.cold_seconds;
  report_compute_peak(peak);
  report("attention_macs_per_kv_byte", decode_macs_per_kv_byte(shape));
  report("attention_compute_bound_kv_gbps", roofline.compute_bound_bytes_per_s / 1e9);
  report("attention_roofline_kv_gbps", roofline.bytes_per_s / 1e9);
  report("attention_roofline_limit", roofline.limit());
  report("attention_roofline_fraction", batch_cold_bps / roofline.bytes_per_s);
  if (against_f16) {
    const double f16_cold_bps =
        static_cast<double>(batched_f16.set_bytes) / batched_f16.cold_seconds;
    const DecodeRoofline f16_roofline =
        decode_roofline(one_layer_f16, bw.read_bytes_per_s, peak.fma_per_s);
    report("attention_f16_batch_cold_seconds", batched_f16.cold_seconds);
    report("attention_f16_batch_cold_kv_gbps", f16_cold_bps / 1e9);
    report("attention_f16_roofline_fraction", f16_cold_bps / f16_roofline.bytes_per_s);
    report("attention_decode_cold_vs_f16", batched_f16.cold_seconds / batched.cold_seconds);
  }
  report("attention_batch_cold_paired_fraction", batched.cold_paired_fraction);
  report("attention_bw_fraction", batch_cold_bps / bw.read_bytes_per_s);
  return 0;
}

}  // namespace kvc_bench
