#include "compute_peak.hpp"

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <thread>
#include <vector>

#include "report.hpp"
#include "timer.hpp"

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>

#include "kvcache_support/cpu_features.hpp"
#define KVC_BENCH_X86_FMA 1
#endif

namespace kvc_bench {
namespace {

// Every chain repeats acc = acc * kScale + kOffset, which settles at kOffset / (1 - kScale) = 1:
// the values stay normal, so no lane slows down on denormals or infinities.
constexpr float kScale = 0.999f;
constexpr float kOffset = 0.001f;

// Runs `iterations` rounds of its chains, each round `lanes_per_iteration` multiply-adds, and
// stores the chains' sum in *sink so the work is not dead.
struct FmaKernel {
  const char* isa;
  uint64_t lanes_per_iteration;
  void (*run)(uint64_t iterations, float* sink);
};

// 12 chains of 4 lanes (SSE2 or NEON): 12 of the 16 vector registers x86-64 has, the rest for
// the constants.
constexpr int kPortableLanes = 48;

template <size_t N>
float sum_of(const float (&values)[N]) {
  float sum = 0;
  for (const float x : values) sum += x;
  return sum;
}

void run_portable(uint64_t iterations, float* sink) {
  float acc[kPortableLanes];
  for (int j = 0; j < kPortableLanes; ++j) acc[j] = static_cast<float>(j) / kPortableLanes;
  for (uint64_t i = 0; i < iterations; ++i) {
    for (float& a : acc) a = a * kScale + kOffset;
  }
  *sink = sum_of(acc);
}

#ifdef KVC_BENCH_X86_FMA
// Enough independent chains to cover the FMA latency (4-5 cycles) at up to two issues per
// cycle, with room: 16 of the 32 zmm registers, 12 of the 16 ymm registers.
constexpr int kZmmChains = 16;
constexpr int kYmmChains = 12;

__attribute__((target("avx512f"))) void run_avx512(uint64_t iterations, float* sink) {
  const __m512 scale = _mm512_set1_ps(kScale);
  const __m512 offset = _mm512_set1_ps(kOffset);
  __m512 acc[kZmmChains];
  for (int j = 0; j < kZmmChains; ++j) acc[j] = _mm512_set1_ps(static_cast<float>(j) / kZmmChains);
  for (uint64_t i = 0; i < iterations; ++i) {
#pragma GCC unroll 16
    for (int j = 0; j < kZmmChains; ++j) acc[j] = _mm512_fmadd_ps(acc[j], scale, offset);
  }
  __m512 sum = acc[0];
  for (int j = 1; j < kZmmChains; ++j) sum = _mm512_add_ps(sum, acc[j]);
  alignas(64) float lanes[16];
  _mm512_store_ps(lanes, sum);  // not _mm512_reduce_add_ps: GCC 12 warns inside it
  *sink = sum_of(lanes);
}

__attribute__((target("avx2,fma"))) void run_avx2(uint64_t iterations, float* sink) {
  const __m256 scale = _mm256_set1_ps(kScale);
  const __m256 offset = _mm256_set1_ps(kOffset);
  __m256 acc[kYmmChains];
  for (int j = 0; j < kYmmChains; ++j) acc[j] = _mm256_set1_ps(static_cast<float>(j) / kYmmChains);
  for (uint64_t i = 0; i < iterations; ++i) {
#pragma GCC unroll 12
    for (int j = 0; j < kYmmChains; ++j) acc[j] = _mm256_fmadd_ps(acc[j], scale, offset);
  }
  __m256 sum = acc[0];
  for (int j = 1; j < kYmmChains; ++j) sum = _mm256_add_ps(sum, acc[j]);
  alignas(32) float lanes[8];
  _mm256_store_ps(lanes, sum);
  *sink = sum_of(lanes);
}

#endif

FmaKernel widest_kernel() {
#ifdef KVC_BENCH_X86_FMA
  // The same checks as the CPU plugin's kernel sets, so the ISA named is the one they run.
  if (kvc::support::missing_for_avx512() == nullptr) return {"avx512", kZmmChains * 16, run_avx512};
  if (kvc::support::missing_for_avx2() == nullptr) return {"avx2", kYmmChains * 8, run_avx2};
#endif
  return {"portable", kPortableLanes, run_portable};
}

constexpr size_t kSinkStride = 16;  // floats: one cache line per thread

// Seconds from one common start until the last of `threads` threads, each running `iterations`
// rounds of the kernel, is done.
double time_threads(const FmaKernel& kernel, uint64_t iterations, int threads,
                    std::vector<float>& sinks) {
  if (threads == 1) {
    Timer t;
    kernel.run(iterations, sinks.data());
    return t.seconds();
  }
  std::vector<std::thread> pool;
  pool.reserve(static_cast<size_t>(threads));
  Timer t;
  for (int i = 0; i < threads; ++i) {
    float* sink = sinks.data() + static_cast<size_t>(i) * kSinkStride;
    pool.emplace_back([&kernel, iterations, sink] { kernel.run(iterations, sink); });
  }
  for (auto& th : pool) th.join();
  return t.seconds();
}

constexpr double kCalibrationSeconds = 0.02;
constexpr double kPassSeconds = 0.2;

}  // namespace

ComputePeak measure_compute_peak(int threads, int reps) {
  threads = std::max(threads, 1);
  reps = std::max(reps, 1);
  const FmaKernel kernel = widest_kernel();
  std::vector<float> sinks(static_cast<size_t>(threads) * kSinkStride, 0.0f);

  // Iterations for one pass: one thread's rate, timed over a run long enough to be measured.
  uint64_t probe = uint64_t{1} << 12;
  double probe_s = time_threads(kernel, probe, 1, sinks);
  while (probe_s < kCalibrationSeconds) {
    probe *= 2;
    probe_s = time_threads(kernel, probe, 1, sinks);
  }
  const auto iterations =
      std::max<uint64_t>(1, static_cast<uint64_t>(static_cast<double>(probe) * kPassSeconds / probe_s));

  double best = 1e300;
  for (int r = 0; r < reps; ++r) best = std::min(best, time_threads(kernel, iterations, threads, sinks));
  clobber_memory(sinks.data());

  ComputePeak peak;
  peak.fma_per_s = static_cast<double>(iterations) * static_cast<double>(kernel.lanes_per_iteration) *
                   threads / best;
  peak.isa = kernel.isa;
  peak.threads = threads;
  return peak;
}

void report_compute_peak(const ComputePeak& peak) {
  report("compute_isa", peak.isa);
  report("fma_gflops", peak.fma_per_s / 1e9);
}

}  // namespace kvc_bench
