// The device's read bandwidth for a kernel that only reads (read_baseline.cu).
#pragma once

#include <cstddef>

namespace kvc_bench::cuda {

/// Bytes per second a kernel reading `bytes` of device memory once reaches (the fastest of
/// `reps` after a warm-up); throws Error on a CUDA error.
double read_bytes_per_s(size_t bytes, int reps);

}  // namespace kvc_bench::cuda
