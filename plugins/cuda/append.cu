// append: K and V rows of new tokens, from host or device memory, f32 or the storage dtype,
// scattered into their blocks; positions stored and the new tokens' statistics zeroed.
#include <vector>

#include "cuda_check.hpp"
#include "device_types.hpp"
#include "instance.hpp"
#include "validation.hpp"

namespace kvc::cuda {
namespace {

constexpr int kWarps = 4;  // tokens per thread block, one per warp

__global__ void __launch_bounds__(kWarps * 32)
    append_kernel(const DevAppendJob* jobs, const int64_t* job_begins, int32_t n_jobs,
                  int64_t n_tokens, int32_t head_dim, int32_t storage_dtype) {
  const int64_t token = int64_t(blockIdx.x) * kWarps + threadIdx.x / 32;
  if (token >= n_tokens) return;
  const int lane = threadIdx.x % 32;
  const int32_t j = find_range(job_begins, n_jobs, token);
  const DevAppendJob& job = jobs[j];
  const int64_t t = token - job_begins[j];
  const char* src_k = static_cast<const char*>(job.src_k) +
                      t * kvc_format_row_bytes(job.src_dtype, size_t(job.src_k_stride));
  const char* src_v = static_cast<const char*>(job.src_v) +
                      t * kvc_format_row_bytes(job.src_v_dtype, size_t(job.src_v_stride));
  const size_t dst_row = kvc_format_row_bytes(storage_dtype, size_t(head_dim));
  char* dst_k = static_cast<char*>(job.dst_k) + t * dst_row;
  char* dst_v = static_cast<char*>(job.dst_v) + t * dst_row;
  for (int32_t i = lane; i < head_dim; i += 32) {
    convert_element(src_k, job.src_dtype, dst_k, storage_dtype, size_t(i));
    convert_element(src_v, job.src_v_dtype, dst_v, storage_dtype, size_t(i));
  }
  if (lane == 0) {
    job.dst_pos[t] = job.src_pos[t];
    if (job.dst_stats.sum) job.dst_stats.sum[t] = 0.0f;
    if (job.dst_stats.last) job.dst_stats.last[t] = 0.0f;
    if (job.dst_stats.window) job.dst_stats.window[t] = 0.0f;
  }
}

void validate(const kvc_append_job* jobs, const kvc_append_call& call) {
  check_storage(call.head_dim, call.storage_dtype, call.v_dtype);
  for (size_t j = 0; j < call.n_jobs; ++j) {
    const kvc_append_job& job = jobs[j];
    for (kvc_dtype src : {job.src_dtype, job.src_v_dtype})
      if (src != call.storage_dtype && src != KVC_DTYPE_F32)
        fail(KVC_ERR_INVALID_ARGUMENT,
             "append job %zu: source dtype %d is neither f32 nor the storage dtype", j, int(src));
    if (job.n_tokens < 0)
      fail(KVC_ERR_INVALID_ARGUMENT, "append job %zu: negative n_tokens %d", j, job.n_tokens);
    check_device(job.src_device, "the K/V source", j);
    if (job.n_tokens > 0 && (!job.src_k || !job.src_v || !job.src_pos || !job.dst_k ||
                             !job.dst_v || !job.dst_pos))
      fail(KVC_ERR_INVALID_ARGUMENT, "append job %zu: a NULL pointer", j);
  }
}

// Host rows `n` rows of `stride` values of `dtype` apart, packed into the upload; returns
// their offset.
size_t stage_rows(Upload& upload, const void* rows, size_t stride, size_t n, size_t head_dim,
                  kvc_dtype dtype) {
  const size_t row = kvc_format_row_bytes(dtype, head_dim);
  const size_t from_stride = kvc_format_row_bytes(dtype, stride);
  const size_t offset = upload.add(nullptr, n * row);
  for (size_t t = 0; t < n; ++t)
    std::memcpy(upload.at<char>(offset) + t * row,
                static_cast<const char*>(rows) + t * from_stride, row);
  return offset;
}

}  // namespace

void run_append(Instance& instance, const kvc_append_job* jobs, const kvc_append_call& call) {
  validate(jobs, call);
  const size_t n_jobs = call.n_jobs;
  if (n_jobs == 0) return;
  const cudaStream_t stream = stream_of(call.stream);
  const size_t head_dim = size_t(call.head_dim);
  Upload upload;
  const size_t table = upload.add_array<DevAppendJob>(nullptr, n_jobs);
  std::vector<int64_t> begins(n_jobs);
  int64_t total = 0;
  for (size_t j = 0; j < n_jobs; ++j) {
    begins[j] = total;
    total += jobs[j].n_tokens;
  }
  const size_t begins_at = upload.add_array(begins.data(), n_jobs);
  for (size_t j = 0; j < n_jobs; ++j) {
    const kvc_append_job& job = jobs[j];
    const size_t at = table + j * sizeof(DevAppendJob);
    DevAppendJob d{job.src_k, job.src_v, int64_t(job.src_k_stride), int64_t(job.src_v_stride),
                   nullptr, job.dst_k, job.dst_v, job.dst_pos,
                   {job.dst_stats.attn_sum, job.dst_stats.attn_last, job.dst_stats.attn_window},
                   int32_t(job.src_dtype), int32_t(job.src_v_dtype)};
    const size_t n = size_t(job.n_tokens);
    if (job.src_device == KVC_DEVICE_HOST && n > 0) {
      const size_t k = stage_rows(upload, job.src_k, job.src_k_stride, n, head_dim, job.src_dtype);
      const size_t v =
          stage_rows(upload, job.src_v, job.src_v_stride, n, head_dim, job.src_v_dtype);
      d.src_k_stride = d.src_v_stride = int64_t(head_dim);
      upload.link(at + offsetof(DevAppendJob, src_k), k);
      upload.link(at + offsetof(DevAppendJob, src_v), v);
    }
    const size_t pos = upload.add_array(job.src_pos, n);
    upload.link(at + offsetof(DevAppendJob, src_pos), pos);
    *upload.at<DevAppendJob>(at) = d;
  }
  if (total == 0) return;
  const DeviceScratch memory(instance.scratch, upload.size(), stream);
  upload.send(instance.pinned, memory);
  const int64_t blocks = (total + kWarps - 1) / kWarps;
  append_kernel<<<unsigned(blocks), kWarps * 32, 0, stream>>>(
      reinterpret_cast<const DevAppendJob*>(memory.data() + table),
      reinterpret_cast<const int64_t*>(memory.data() + begins_at), int32_t(n_jobs), total,
      call.head_dim, int32_t(call.storage_dtype));
  check_cuda(cudaGetLastError(), "launching append");
}

}  // namespace kvc::cuda
