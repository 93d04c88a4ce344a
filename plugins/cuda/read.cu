// read_keys and read_tokens: stored keys as f32 rows, and positions and statistics, gathered
// on the device into one scratch array, downloaded once and handed out to each job's output.
#include <vector>

#include "cuda_check.hpp"
#include "device_types.hpp"
#include "instance.hpp"
#include "token_index.hpp"
#include "validation.hpp"

namespace kvc::cuda {
namespace {

constexpr int kWarps = 4;        // read_keys: tokens per block, one per warp
constexpr int kTokenThreads = 128;  // read_tokens: one token per thread

struct ReadParams {
  const DevTokensJob* jobs;
  const int64_t* job_begins;
  int32_t n_jobs;
  int64_t n_tokens;
};

struct Token {
  const DevTokensJob* job;
  const DevSegment* segment;
  int64_t local;  // within the segment
  int64_t index;  // within the job
};

__device__ Token token_at(const ReadParams& p, int64_t flat) {
  const int32_t j = find_range(p.job_begins, p.n_jobs, flat);
  const DevTokensJob& job = p.jobs[j];
  const int64_t index = flat - p.job_begins[j];
  const int32_t s = find_range(job.segment_begins, job.n_segments, index);
  return {&job, &job.segments[s], index - job.segment_begins[s], index};
}

__global__ void __launch_bounds__(kWarps * 32)
    read_keys_kernel(ReadParams p, int32_t head_dim, int32_t storage_dtype, float* out) {
  const int64_t flat = int64_t(blockIdx.x) * kWarps + threadIdx.x / 32;
  if (flat >= p.n_tokens) return;
  const Token t = token_at(p, flat);
  const char* row = static_cast<const char*>(t.segment->k) +
                    t.local * int64_t(kvc_format_row_bytes(storage_dtype, size_t(head_dim)));
  for (int32_t d = threadIdx.x % 32; d < head_dim; d += 32)
    out[flat * head_dim + d] = load_as_f32(row, storage_dtype, size_t(d));
}

// out: [n_tokens] positions, then [3][n_tokens] statistics (written where the job has them).
__global__ void __launch_bounds__(kTokenThreads)
    read_tokens_kernel(ReadParams p, const DevStats* stats, int32_t* pos, float* out_stats) {
  const int64_t flat = int64_t(blockIdx.x) * kTokenThreads + threadIdx.x;
  if (flat >= p.n_tokens) return;
  const Token t = token_at(p, flat);
  pos[flat] = t.segment->pos[t.local];
  const DevStats& s = stats[t.job - p.jobs];
  const float* sources[3] = {s.sum, s.last, s.window};
  for (int which = 0; which < 3; ++which)
    if (sources[which]) out_stats[which * p.n_tokens + flat] = sources[which][t.index];
}

// The device tables of jobs that each read all tokens of their segments.
template <class Job>
struct ReadTables {
  Upload upload;
  size_t table = 0;
  size_t begins_at = 0;
  std::vector<int64_t> begins;
  int64_t total = 0;

  ReadTables(const Job* jobs, size_t n_jobs, const char* call, Reads reads) {
    std::vector<int32_t> counts(n_jobs);
    for (size_t j = 0; j < n_jobs; ++j)
      counts[j] = count_tokens(jobs[j].segments, jobs[j].n_segments, call, j, reads);
    total = token_begins(counts, begins);
    table = upload.add_array<DevTokensJob>(nullptr, n_jobs);
    begins_at = upload.add_array(begins.data(), n_jobs);
    for (size_t j = 0; j < n_jobs; ++j) {
      const size_t at = table + j * sizeof(DevTokensJob);
      size_t segments_at = 0, segment_begins_at = 0;
      add_segments(upload, jobs[j].segments, jobs[j].n_segments, segments_at, segment_begins_at);
      upload.link(at + offsetof(DevTokensJob, segments), segments_at);
      upload.link(at + offsetof(DevTokensJob, segment_begins), segment_begins_at);
      upload.at<DevTokensJob>(at)->n_segments = jobs[j].n_segments;
    }
  }
  ReadParams params(const DeviceScratch& memory, size_t n_jobs) const {
    return {reinterpret_cast<const DevTokensJob*>(memory.data() + table),
            reinterpret_cast<const int64_t*>(memory.data() + begins_at), int32_t(n_jobs), total};
  }
};

}  // namespace

void run_read_keys(Instance& instance, const kvc_read_keys_job* jobs,
                   const kvc_read_keys_call& call) {
  check_storage(call.head_dim, call.storage_dtype, call.storage_dtype);
  ReadTables<kvc_read_keys_job> tables(jobs, call.n_jobs, "read_keys", Reads::rows_and_positions);
  for (size_t j = 0; j < call.n_jobs; ++j) {
    check_segment_formats(jobs[j].segments, jobs[j].n_segments, call.storage_dtype,
                          call.storage_dtype, false, "read_keys", j);
    const int64_t end = j + 1 < call.n_jobs ? tables.begins[j + 1] : tables.total;
    if (end > tables.begins[j] && jobs[j].out == nullptr)
      fail(KVC_ERR_INVALID_ARGUMENT, "read_keys job %zu: out is NULL", j);
  }
  if (tables.total == 0) return;
  const cudaStream_t stream = stream_of(call.stream);
  const size_t row = size_t(call.head_dim);
  const size_t out_bytes = size_t(tables.total) * row * sizeof(float);
  const DeviceScratch out(instance.scratch, out_bytes, stream);
  const DeviceScratch memory(instance.scratch, tables.upload.size(), stream);
  tables.upload.send(instance.pinned, memory);
  const unsigned blocks = unsigned((tables.total + kWarps - 1) / kWarps);
  read_keys_kernel<<<blocks, kWarps * 32, 0, stream>>>(tables.params(memory, call.n_jobs),
                                                       call.head_dim, int32_t(call.storage_dtype),
                                                       reinterpret_cast<float*>(out.data()));
  check_cuda(cudaGetLastError(), "launching read_keys");
  download(instance.pinned, out.data(), out_bytes, stream, [&](const char* host) {
    const auto* rows = reinterpret_cast<const float*>(host);
    for (size_t j = 0; j < call.n_jobs; ++j) {
      const int64_t end = j + 1 < call.n_jobs ? tables.begins[j + 1] : tables.total;
      const size_t n = size_t(end - tables.begins[j]) * row;
      if (n > 0) std::memcpy(jobs[j].out, rows + size_t(tables.begins[j]) * row, n * sizeof(float));
    }
  });
}

void run_read_tokens(Instance& instance, const kvc_read_tokens_job* jobs,
                     const kvc_read_tokens_call& call) {
  ReadTables<kvc_read_tokens_job> tables(jobs, call.n_jobs, "read_tokens", Reads::positions);
  std::vector<DevStats> stats(call.n_jobs);
  for (size_t j = 0; j < call.n_jobs; ++j) {
    const kvc_read_tokens_job& job = jobs[j];
    const int64_t end = j + 1 < call.n_jobs ? tables.begins[j + 1] : tables.total;
    if (end == tables.begins[j]) continue;
    if ((job.out_attn_sum && !job.stats.attn_sum) || (job.out_attn_last && !job.stats.attn_last) ||
        (job.out_attn_window && !job.stats.attn_window))
      fail(KVC_ERR_INVALID_ARGUMENT, "read_tokens: a statistic is asked for but not stored");
    stats[j] = {job.out_attn_sum ? job.stats.attn_sum : nullptr,
                job.out_attn_last ? job.stats.attn_last : nullptr,
                job.out_attn_window ? job.stats.attn_window : nullptr};
  }
  if (tables.total == 0) return;
  const size_t stats_at = tables.upload.add_array(stats.data(), stats.size());
  const cudaStream_t stream = stream_of(call.stream);
  const size_t n = size_t(tables.total);
  const size_t out_bytes = n * (sizeof(int32_t) + 3 * sizeof(float));
  const DeviceScratch out(instance.scratch, out_bytes, stream);
  const DeviceScratch memory(instance.scratch, tables.upload.size(), stream);
  tables.upload.send(instance.pinned, memory);
  auto* pos = reinterpret_cast<int32_t*>(out.data());
  auto* out_stats = reinterpret_cast<float*>(out.data() + n * sizeof(int32_t));
  const unsigned blocks = unsigned((n + kTokenThreads - 1) / kTokenThreads);
  read_tokens_kernel<<<blocks, kTokenThreads, 0, stream>>>(
      tables.params(memory, call.n_jobs),
      reinterpret_cast<const DevStats*>(memory.data() + stats_at), pos, out_stats);
  check_cuda(cudaGetLastError(), "launching read_tokens");
  download(instance.pinned, out.data(), out_bytes, stream, [&](const char* host) {
    const auto* host_pos = reinterpret_cast<const int32_t*>(host);
    const auto* host_stats = reinterpret_cast<const float*>(host + n * sizeof(int32_t));
    for (size_t j = 0; j < call.n_jobs; ++j) {
      const kvc_read_tokens_job& job = jobs[j];
      const size_t first = size_t(tables.begins[j]);
      const int64_t end = j + 1 < call.n_jobs ? tables.begins[j + 1] : tables.total;
      const size_t count = size_t(end) - first;
      if (count == 0) continue;
      if (job.out_pos) std::memcpy(job.out_pos, host_pos + first, count * sizeof(int32_t));
      float* outs[3] = {job.out_attn_sum, job.out_attn_last, job.out_attn_window};
      for (int which = 0; which < 3; ++which)
        if (outs[which])
          std::memcpy(outs[which], host_stats + which * n + first, count * sizeof(float));
    }
  });
}

}  // namespace kvc::cuda
