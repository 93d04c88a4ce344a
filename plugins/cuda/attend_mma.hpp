// attend on tensor cores (attend_mma.cu): work items of kMmaRows rows for f16 and bf16 storage
// with head_dim 64 to 128 in steps of 16 and 16-byte aligned rows.
#pragma once

#include <cuda_runtime_api.h>

#include <cstddef>

#include "attend_kernels.cuh"

namespace kvc::cuda {

constexpr int kMmaRows = 16;
// Split-K aims at this many of its blocks per multiprocessor (two fit at once).
constexpr int kMmaBlocksPerMultiprocessor = 16;

bool mma_applies(int storage_dtype, int head_dim, bool vector_loads);

// Runs attend_mma_kernel over `items` work items of params.rows_per_item = kMmaRows rows.
void launch_attend_mma(const AttendParams& params, int storage_dtype, size_t items,
                       cudaStream_t stream);

}  // namespace kvc::cuda
