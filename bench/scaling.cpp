// kvc-bench scaling: cold decode attention (bench/attention_cold.*) at one thread and at every
// thread, against the read bandwidth's own scaling and the roofline's (read bandwidth or the
// multiply-add rate, the lower), both measured in the same run.
#include <algorithm>
#include <thread>

#include "attention_cold.hpp"
#include "bandwidth.hpp"
#include "compute_peak.hpp"
#include "machine.hpp"
#include "report.hpp"
#include "subcommands.hpp"

namespace kvc_bench {

const char* const kScalingHelp = KVC_BENCH_CACHE_SHAPE_HELP
    "  --decode_batch=N  sequences decoded in one batch on one layer (default 8)\n"
    "  --threads=N     the 'all threads' count (default 0: all cores)\n"
    "  --cold_mib=N    K/V rotated for the cold figures and bandwidth buffer (default 1024)\n"
    "  --reps=N        passes over the sets; the fastest counts (default 10)\n"
    "thread_scaling_efficiency = (attention speedup from 1 to N threads) / (read bandwidth\n"
    "speedup from 1 to N threads): 1 means attention scales exactly as the memory does.\n"
    "The roofline at each thread count is min(read bandwidth, FMA rate / multiply-adds per K/V\n"
    "byte); where threads share one core's FMA units (SMT) the compute bound does not grow, and\n"
    "thread_scaling_efficiency_vs_roofline = attention speedup / roofline speedup.\n";

int run_scaling(Options& opts) {
  CacheShape shape = CacheShape::read(opts);
  shape.layers = 1;
  const int32_t decode_batch = static_cast<int32_t>(opts.get_int("decode_batch", 8, 1, 4096));
  const int requested = static_cast<int>(opts.get_int("threads", 0, 0, 4096));
  const uint64_t cold_bytes =
      static_cast<uint64_t>(opts.get_int("cold_mib", 1024, 1, int64_t{1} << 20)) << 20;
  const int reps = static_cast<int>(opts.get_int("reps", 10, 1, 1000));
  opts.reject_unknown();
  report_machine();
  const int all = requested > 0 ? requested
                                : static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  const Bandwidth bw_one = measure_bandwidth(static_cast<size_t>(cold_bytes), 1);
  const Bandwidth bw_all = measure_bandwidth(static_cast<size_t>(cold_bytes), all);
  const ComputePeak peak_one = measure_compute_peak(1);
  const ComputePeak peak_all = measure_compute_peak(all);
  const DecodeTimes one = time_decode(shape, decode_batch, cold_bytes, 1, reps);
  const DecodeTimes many = time_decode(shape, decode_batch, cold_bytes, all, reps);
  shape.report();
  report("decode_batch", decode_batch);
  report("threads", all);
  report("read_gbps_1_thread", bw_one.read_bytes_per_s / 1e9);
  report("read_gbps_all_threads", bw_all.read_bytes_per_s / 1e9);
  report("attention_cold_kv_gbps_1_thread", static_cast<double>(one.set_bytes) / one.cold_seconds / 1e9);
  report("attention_cold_kv_gbps_all_threads",
         static_cast<double>(many.set_bytes) / many.cold_seconds / 1e9);
  const double attention_speedup = one.cold_seconds / many.cold_seconds;
  const double bandwidth_speedup = bw_all.read_bytes_per_s / bw_one.read_bytes_per_s;
  const DecodeRoofline roofline_one =
      decode_roofline(shape, bw_one.read_bytes_per_s, peak_one.fma_per_s);
  const DecodeRoofline roofline_all =
      decode_roofline(shape, bw_all.read_bytes_per_s, peak_all.fma_per_s);
  const double roofline_speedup = roofline_all.bytes_per_s / roofline_one.bytes_per_s;
  report("compute_isa", peak_all.isa);
  report("fma_gflops_1_thread", peak_one.fma_per_s / 1e9);
  report("fma_gflops_all_threads", peak_all.fma_per_s / 1e9);
  report("compute_speedup", peak_all.fma_per_s / peak_one.fma_per_s);
  report("attention_macs_per_kv_byte", decode_macs_per_kv_byte(shape));
  report("roofline_kv_gbps_1_thread", roofline_one.bytes_per_s / 1e9);
  report("roofline_limit_1_thread", roofline_one.limit());
  report("roofline_kv_gbps_all_threads", roofline_all.bytes_per_s / 1e9);
  report("roofline_limit_all_threads", roofline_all.limit());
  report("attention_speedup", attention_speedup);
  report("read_bandwidth_speedup", bandwidth_speedup);
  report("roofline_speedup", roofline_speedup);
  report("thread_scaling_efficiency_vs_roofline", attention_speedup / roofline_speedup);
  report("thread_scaling_efficiency", attention_speedup / bandwidth_speedup);
  return 0;
}

}  // namespace kvc_bench
