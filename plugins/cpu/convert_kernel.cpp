#include "convert_kernel.hpp"

#include <cstring>
#include <vector>

#include "kernels.hpp"
#include "parallel.hpp"
#include "row_convert.hpp"
#include "validation.hpp"

namespace kvc::cpu {
namespace {

void validate(const kvc_convert_job* jobs, const kvc_convert_call& call) {
  for (size_t j = 0; j < call.n_jobs; ++j) {
    const kvc_convert_job& job = jobs[j];
    if (job.n_tokens < 1)
      fail(KVC_ERR_INVALID_ARGUMENT, "convert job %zu: n_tokens must be >= 1, got %d", j,
           job.n_tokens);
    if (!job.src_k || !job.src_v || !job.dst_k || !job.dst_v)
      fail(KVC_ERR_INVALID_ARGUMENT, "convert job %zu has a NULL pointer", j);
    check_storage(call.head_dim, StorageFormats{job.src_k_dtype, job.src_v_dtype});
    check_storage(call.head_dim, StorageFormats{job.dst_k_dtype, job.dst_v_dtype});
  }
}

// n_rows rows of head_dim values from `from` to `to`: a plain copy between the same formats,
// else each row decoded to f32 and encoded again, as the format table's reference does.
void convert_rows(const void* src, kvc_dtype from, void* dst, kvc_dtype to, size_t n_rows,
                  size_t head_dim) {
  const size_t src_bytes = kvc_format_row_bytes(from, head_dim);
  const size_t dst_bytes = kvc_format_row_bytes(to, head_dim);
  if (from == to) {
    std::memcpy(dst, src, n_rows * src_bytes);
    return;
  }
  const TileKernels& kernels = tile_kernels();
  thread_local std::vector<float> row;
  row.resize(head_dim);
  for (size_t r = 0; r < n_rows; ++r) {
    load_row_f32(kernels, static_cast<const char*>(src) + r * src_bytes, from, row.data(),
                 head_dim);
    store_row_f32(kernels, row.data(), static_cast<char*>(dst) + r * dst_bytes, to, head_dim);
  }
}

}  // namespace

void run_convert(const kvc_host_api& host, const kvc_convert_job* jobs,
                 const kvc_convert_call& call) {
  validate(jobs, call);
  const size_t head_dim = size_t(call.head_dim);
  parallel_for(host, call.n_jobs, 1, [&](size_t begin, size_t end) {
    for (size_t j = begin; j < end; ++j) {
      const kvc_convert_job& job = jobs[j];
      const size_t n = size_t(job.n_tokens);
      convert_rows(job.src_k, job.src_k_dtype, job.dst_k, job.dst_k_dtype, n, head_dim);
      convert_rows(job.src_v, job.src_v_dtype, job.dst_v, job.dst_v_dtype, n, head_dim);
    }
  });
}

}  // namespace kvc::cpu
