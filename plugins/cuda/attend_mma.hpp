// attend on tensor cores (attend_mma.cu): work items of kMmaRows rows for f16 and bf16 storage
// with head_dim 64 to 128 in steps of 16 and 16-byte aligned rows.
#pragma once

#include <cuda_runtime_api.h>

#include <cstddef>

#include "attend_kernels.cuh"

namespace kvc::cuda {

constexpr int kMmaRows = 16;
// Split-K aims at this many of its blocks per multiprocessor (two fit at once): fewer, longer
// parts than the CUDA-core kernels', since each pays a pipeline start and a merge. On an H200
// (f16 decode, 32 x 8192 tokens) 8 gave 2587 GB/s, 16 2312 and 32 2012.
constexpr int kMmaBlocksPerMultiprocessor = 8;

bool mma_applies(int storage_dtype, int head_dim, bool vector_loads);

// Runs attend_mma_kernel over `items` work items of params.rows_per_item = kMmaRows rows.
void launch_attend_mma(const AttendParams& params, int storage_dtype, size_t items,
                       cudaStream_t stream);

}  // namespace kvc::cuda
