// kvc-bench with --backend cuda (docs/cuda.md): the device's own copy bandwidth as the
// baseline, and decode/prefill attention and append with Q, K, V and out in device memory on
// one stream. Built where the cuda backend is (KVC_BENCH_HAVE_CUDA); elsewhere each function
// throws Error saying that this kvc-bench has no CUDA.
#pragma once

#include <cstddef>
#include <cstdint>

#include "../filled_cache.hpp"

namespace kvc_bench::cuda {

/// Bytes read plus bytes written per second by device-to-device cudaMemcpy of `bytes` (the
/// fastest of `reps`): what the device's memory sustains for a streaming kernel.
double copy_bytes_per_s(size_t bytes, int reps);

/// kvc-bench attention --backend cuda: reports device_copy_gbps first, then decode attention
/// of `batch` sequences of shape.tokens tokens (attention_bw_fraction against the copy
/// bandwidth), the prefill chunk's attention and append.
int run_attention(const CacheShape& shape, int32_t batch, int32_t chunk, int reps,
                  int prefill_reps);

}  // namespace kvc_bench::cuda
