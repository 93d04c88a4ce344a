// compact: the kept tokens of each job move to the front of its storage with their K, V,
// position and statistics. Rows are gathered into scratch by one kernel and written back by a
// second, so no row is overwritten before it is read, whatever the threads' order.
#include <vector>

#include "cuda_check.hpp"
#include "device_types.hpp"
#include "instance.hpp"
#include "token_index.hpp"
#include "validation.hpp"

namespace kvc::cuda {
namespace {

constexpr int kWarps = 4;  // kept tokens per thread block, one per warp

struct CompactParams {
  const DevCompactJob* jobs;
  const int64_t* job_begins;  // first kept token of each job
  int32_t n_jobs;
  int64_t n_kept;
  int32_t row_units;  // 16-bit units of a K or V row
  // Scratch: [n_kept][row_units] K, the same for V, then [n_kept] positions and 3 statistics.
  uint16_t* k;
  uint16_t* v;
  int32_t* pos;
  float* stats[3];
};

// Where token `index` of a job is stored.
struct Place {
  const DevSegment* segment;
  int64_t local;
};

__device__ Place place_of(const DevCompactJob& job, int64_t index) {
  const int32_t s = find_range(job.segment_begins, job.n_segments, index);
  return {&job.segments[s], index - job.segment_begins[s]};
}

__device__ float* stat_of(const DevCompactJob& job, int which) {
  return which == 0 ? job.stats.sum : which == 1 ? job.stats.last : job.stats.window;
}

// gather: scratch[i] = token keep[i]; else token i = scratch[i].
template <bool kGather>
__global__ void __launch_bounds__(kWarps * 32) compact_kernel(CompactParams p) {
  const int64_t i = int64_t(blockIdx.x) * kWarps + threadIdx.x / 32;
  if (i >= p.n_kept) return;
  const int lane = threadIdx.x % 32;
  const int32_t j = find_range(p.job_begins, p.n_jobs, i);
  const DevCompactJob& job = p.jobs[j];
  const int64_t kept = i - p.job_begins[j];
  const int64_t token = kGather ? job.keep[kept] : kept;
  const Place at = place_of(job, token);
  auto* k = const_cast<uint16_t*>(static_cast<const uint16_t*>(at.segment->k)) + at.local * p.row_units;
  auto* v = const_cast<uint16_t*>(static_cast<const uint16_t*>(at.segment->v)) + at.local * p.row_units;
  uint16_t* k_scratch = p.k + i * p.row_units;
  uint16_t* v_scratch = p.v + i * p.row_units;
  for (int32_t u = lane; u < p.row_units; u += 32) {
    if (kGather) {
      k_scratch[u] = k[u];
      v_scratch[u] = v[u];
    } else {
      k[u] = k_scratch[u];
      v[u] = v_scratch[u];
    }
  }
  if (lane != 0) return;
  auto* pos = const_cast<int32_t*>(at.segment->pos) + at.local;
  if (kGather)
    p.pos[i] = *pos;
  else
    *pos = p.pos[i];
  for (int which = 0; which < 3; ++which) {
    float* stat = stat_of(job, which);
    if (stat == nullptr) continue;
    if (kGather)
      p.stats[which][i] = stat[token];
    else
      stat[token] = p.stats[which][i];
  }
}

void validate(const kvc_compact_job* jobs, const kvc_compact_call& call) {
  check_storage(call.head_dim, call.storage_dtype, call.v_dtype);
  for (size_t j = 0; j < call.n_jobs; ++j) {
    const kvc_compact_job& job = jobs[j];
    const int32_t tokens = count_tokens(job.segments, job.n_segments, "compact", j);
    check_segment_formats(job.segments, job.n_segments, call.storage_dtype, call.v_dtype, true,
                          "compact", j);
    if (job.n_keep < 0 || job.n_keep > tokens || (job.n_keep > 0 && !job.keep))
      fail(KVC_ERR_INVALID_ARGUMENT, "compact job %zu: bad keep list of %d for %d tokens", j,
           job.n_keep, tokens);
    for (int32_t i = 0; i < job.n_keep; ++i) {
      const int32_t index = job.keep[i];
      const int64_t lowest = i == 0 ? 0 : int64_t(job.keep[i - 1]) + 1;
      if (index < lowest || index >= tokens)
        fail(KVC_ERR_INVALID_ARGUMENT,
             "compact job %zu: keep[%d] = %d is out of range or not increasing", j, i, index);
    }
  }
}

}  // namespace

void run_compact(Instance& instance, const kvc_compact_job* jobs, const kvc_compact_call& call) {
  validate(jobs, call);
  const size_t n_jobs = call.n_jobs;
  std::vector<int32_t> counts(n_jobs);
  for (size_t j = 0; j < n_jobs; ++j) counts[j] = jobs[j].n_keep;
  std::vector<int64_t> begins;
  const int64_t total = token_begins(counts, begins);
  if (total == 0) return;
  const cudaStream_t stream = stream_of(call.stream);
  Upload upload;
  const size_t table = upload.add_array<DevCompactJob>(nullptr, n_jobs);
  const size_t begins_at = upload.add_array(begins.data(), n_jobs);
  for (size_t j = 0; j < n_jobs; ++j) {
    const kvc_compact_job& job = jobs[j];
    const size_t at = table + j * sizeof(DevCompactJob);
    size_t segments_at = 0, segment_begins_at = 0;
    add_segments(upload, job.segments, job.n_segments, segments_at, segment_begins_at);
    upload.link(at + offsetof(DevCompactJob, segments), segments_at);
    upload.link(at + offsetof(DevCompactJob, segment_begins), segment_begins_at);
    upload.link(at + offsetof(DevCompactJob, keep), upload.add_array(job.keep, size_t(job.n_keep)));
    *upload.at<DevCompactJob>(at) = {nullptr, nullptr, job.n_segments, nullptr,
                                     {job.stats.attn_sum, job.stats.attn_last,
                                      job.stats.attn_window}};
  }
  const size_t row_units = kvc_format_row_bytes(call.storage_dtype, size_t(call.head_dim)) / 2;
  const size_t n = size_t(total);
  const size_t row_bytes = row_units * sizeof(uint16_t);
  ScratchLayout layout;
  const size_t k_at = layout.take(n * row_bytes);
  const size_t v_at = layout.take(n * row_bytes);
  const size_t pos_at = layout.take(n * sizeof(int32_t));
  size_t stats_at[3];
  for (size_t& at : stats_at) at = layout.take(n * sizeof(float));
  const DeviceScratch scratch(instance.scratch, layout.bytes, stream);
  const DeviceScratch memory(instance.scratch, upload.size(), stream);
  upload.send(instance.pinned, memory);
  char* base = scratch.data();
  CompactParams params{reinterpret_cast<const DevCompactJob*>(memory.data() + table),
                       reinterpret_cast<const int64_t*>(memory.data() + begins_at),
                       int32_t(n_jobs),
                       total,
                       int32_t(row_units),
                       reinterpret_cast<uint16_t*>(base + k_at),
                       reinterpret_cast<uint16_t*>(base + v_at),
                       reinterpret_cast<int32_t*>(base + pos_at),
                       {}};
  for (int which = 0; which < 3; ++which)
    params.stats[which] = reinterpret_cast<float*>(base + stats_at[which]);
  const unsigned blocks = unsigned((total + kWarps - 1) / kWarps);
  compact_kernel<true><<<blocks, kWarps * 32, 0, stream>>>(params);
  check_cuda(cudaGetLastError(), "launching compact (gather)");
  compact_kernel<false><<<blocks, kWarps * 32, 0, stream>>>(params);
  check_cuda(cudaGetLastError(), "launching compact (scatter)");
}

}  // namespace kvc::cuda
