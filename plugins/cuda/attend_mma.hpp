// attend on tensor cores, for f16 and bf16 storage with head_dim 64 to 128 in steps of 16 and
// 16-byte aligned rows: work items of kMmaDecodeRows rows when every job has at most that many
// (attend_mma_decode.cu), else of kMmaRows (attend_mma.cu).
#pragma once

#include <cuda_runtime_api.h>

#include <cstddef>

#include "attend_kernels.cuh"

namespace kvc::cuda {

constexpr int kMmaRows = 16;
constexpr int kMmaDecodeRows = 8;
// Split-K aims at this many of its blocks per multiprocessor (two or three fit at once): fewer,
// longer parts than the CUDA-core kernels', since each pays a pipeline start and a merge
// (docs/cuda_results.md).
constexpr int kMmaBlocksPerMultiprocessor = 8;

bool mma_applies(int storage_dtype, int head_dim, bool vector_loads);

// The rows of a work item for a call whose largest job has max_job_rows rows.
inline int mma_rows(int max_job_rows) {
  return max_job_rows <= kMmaDecodeRows ? kMmaDecodeRows : kMmaRows;
}

// Runs the tensor-core kernel of params.rows_per_item (mma_rows) over `items` work items.
void launch_attend_mma(const AttendParams& params, int storage_dtype, size_t items,
                       cudaStream_t stream);
void launch_attend_mma_decode(const AttendParams& params, int storage_dtype, size_t items,
                              cudaStream_t stream);

}  // namespace kvc::cuda
