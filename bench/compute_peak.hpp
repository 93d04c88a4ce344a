// The machine's arithmetic ceiling measured at the start of a benchmark, beside its memory
// bandwidth (bandwidth.hpp): f32 multiply-adds per second of the widest vector FMA this CPU
// runs, so that a kernel bounded by arithmetic rather than by memory can be told apart.
#pragma once

namespace kvc_bench {

struct ComputePeak {
  /// f32 multiply-adds per second, every vector lane counted, summed over the threads.
  double fma_per_s = 0;
  /// The instructions measured: "avx512" (zmm FMA), "avx2" (ymm FMA) or "portable" (a loop the
  /// compiler vectorised for the build's baseline instruction set).
  const char* isa = "portable";
  int threads = 1;
};

/// Runs independent chains of multiply-adds held in registers on @p threads threads at once,
/// about 0.2 s of one thread's work each per pass; the best of @p reps passes. The instruction
/// set is chosen at run time (CPUID and the OS's saved register state), so a build for the
/// plain baseline still measures the widest FMA the running CPU has.
ComputePeak measure_compute_peak(int threads = 1, int reps = 3);

/// Reports compute_isa and fma_gflops (10^9 multiply-adds/s over all the threads).
void report_compute_peak(const ComputePeak& peak);

}  // namespace kvc_bench
