// The read-only baseline of kvc-bench attention --backend cuda: one kernel that reads a device
// buffer once in 16-byte loads, every multiprocessor busy, and folds what it reads into one
// word per thread block so the loads cannot be dropped. Decode attention reads K and V once,
// so this, not a copy (which also writes), is what its bandwidth is compared with.
#include <cuda_runtime.h>

#include "device_timing.hpp"
#include "read_baseline.hpp"

namespace kvc_bench::cuda {
namespace {

constexpr int kThreads = 512;
constexpr int kUnroll = 4;

__global__ void __launch_bounds__(kThreads)
    read_all(const uint4* data, size_t n, unsigned* sink) {
  unsigned folded = 0;
  const size_t stride = size_t(gridDim.x) * kThreads;
  size_t i = size_t(blockIdx.x) * kThreads + threadIdx.x;
  for (; i + (kUnroll - 1) * stride < n; i += kUnroll * stride) {
    uint4 words[kUnroll];
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) words[u] = __ldcs(data + i + u * stride);
#pragma unroll
    for (int u = 0; u < kUnroll; ++u)
      folded ^= words[u].x ^ words[u].y ^ words[u].z ^ words[u].w;
  }
  for (; i < n; i += stride) {
    const uint4 w = __ldcs(data + i);
    folded ^= w.x ^ w.y ^ w.z ^ w.w;
  }
  folded = __reduce_xor_sync(0xffffffffu, folded);
  if (threadIdx.x % 32 == 0) atomicXor(sink + blockIdx.x, folded);
}

}  // namespace

double read_bytes_per_s(size_t bytes, int reps) {
  int device = 0, sms = 0;
  check_cuda(cudaGetDevice(&device), "cudaGetDevice");
  check_cuda(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device),
        "cudaDeviceGetAttribute");
  const unsigned blocks = unsigned(sms) * 4;
  void* data = nullptr;
  unsigned* sink = nullptr;
  check_cuda(cudaMalloc(&data, bytes), "cudaMalloc");
  check_cuda(cudaMalloc(&sink, blocks * sizeof(unsigned)), "cudaMalloc");
  check_cuda(cudaMemset(data, 1, bytes), "cudaMemset");
  const double seconds = best_device_seconds(reps, [&] {
    read_all<<<blocks, kThreads>>>(static_cast<const uint4*>(data), bytes / sizeof(uint4), sink);
    check_cuda(cudaGetLastError(), "launching the read baseline");
  });
  cudaFree(sink);
  cudaFree(data);
  return double(bytes / sizeof(uint4) * sizeof(uint4)) / seconds;
}

}  // namespace kvc_bench::cuda
