// CUDA errors as kvc-bench errors, and device work timed between CUDA events: the fastest of
// `reps` runs after one warm-up (the device baselines of kvc-bench --backend cuda).
#pragma once

#include <cuda_runtime_api.h>

#include <algorithm>
#include <limits>
#include <string>

#include "../common.hpp"

namespace kvc_bench::cuda {

inline void check_cuda(cudaError_t error, const char* what) {
  if (error != cudaSuccess)
    throw Error(std::string(what) + ": " + cudaGetErrorName(error) + ": " +
                cudaGetErrorString(error));
}

// Seconds of the fastest of `reps` calls of enqueue(), which puts work on the legacy stream,
// after one call that warms up.
template <class Enqueue>
double best_device_seconds(int reps, Enqueue&& enqueue) {
  cudaEvent_t start, stop;
  check_cuda(cudaEventCreate(&start), "cudaEventCreate");
  check_cuda(cudaEventCreate(&stop), "cudaEventCreate");
  float best_ms = std::numeric_limits<float>::infinity();
  for (int rep = 0; rep < reps + 1; ++rep) {
    check_cuda(cudaEventRecord(start), "cudaEventRecord");
    enqueue();
    check_cuda(cudaEventRecord(stop), "cudaEventRecord");
    check_cuda(cudaEventSynchronize(stop), "cudaEventSynchronize");
    float ms = 0;
    check_cuda(cudaEventElapsedTime(&ms, start, stop), "cudaEventElapsedTime");
    if (rep > 0) best_ms = std::min(best_ms, ms);
  }
  cudaEventDestroy(start);
  cudaEventDestroy(stop);
  return double(best_ms) * 1e-3;
}

}  // namespace kvc_bench::cuda
