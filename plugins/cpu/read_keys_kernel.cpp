#include "read_keys_kernel.hpp"

#include "kernels.hpp"
#include "parallel.hpp"
#include "row_convert.hpp"
#include "validation.hpp"

namespace kvc::cpu {
namespace {

void validate(const kvc_read_keys_job* jobs, size_t n_jobs, int32_t head_dim,
              kvc_dtype storage_dtype) {
  check_storage(head_dim, storage_dtype);
  for (size_t j = 0; j < n_jobs; ++j) {
    const size_t tokens = count_tokens(jobs[j].segments, jobs[j].n_segments, "read_keys", j);
    check_segment_formats(jobs[j].segments, jobs[j].n_segments, head_dim, "read_keys", j);
    if (tokens > 0 && jobs[j].out == nullptr)
      fail(KVC_ERR_INVALID_ARGUMENT, "read_keys job %zu: out is NULL", j);
  }
}

void read_keys_job(const kvc_read_keys_job& job, size_t head_dim, kvc_dtype storage_dtype) {
  // A segment's own V format does not matter here: only K is read.
  const StorageFormats call{storage_dtype, storage_dtype};
  float* out = job.out;
  for (int32_t s = 0; s < job.n_segments; ++s) {
    const size_t n = size_t(job.segments[s].count) * head_dim;
    const kvc_dtype k_dtype = segment_formats(job.segments[s], call).k;
    load_row_f32(tile_kernels(), job.segments[s].k, k_dtype, out, n);
    out += n;
  }
}

}  // namespace

void run_read_keys(const kvc_host_api& host, const kvc_read_keys_job* jobs, size_t n_jobs,
                   int32_t head_dim, kvc_dtype storage_dtype) {
  validate(jobs, n_jobs, head_dim, storage_dtype);
  parallel_for(host, n_jobs, 1, [&](size_t begin, size_t end) {
    for (size_t j = begin; j < end; ++j) read_keys_job(jobs[j], size_t(head_dim), storage_dtype);
  });
}

}  // namespace kvc::cpu
