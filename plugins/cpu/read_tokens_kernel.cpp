#include "read_tokens_kernel.hpp"

#include <cstring>
#include <utility>
#include <vector>

#include "parallel.hpp"
#include "validation.hpp"

namespace kvc::cpu {
namespace {

void read_tokens_job(const kvc_read_tokens_job& job, size_t tokens) {
  if (job.out_pos) {
    int32_t* out = job.out_pos;
    for (int32_t s = 0; s < job.n_segments; ++s) {
      std::memcpy(out, job.segments[s].pos, sizeof(int32_t) * size_t(job.segments[s].count));
      out += job.segments[s].count;
    }
  }
  const std::pair<float*, const float*> stats[] = {{job.out_attn_sum, job.stats.attn_sum},
                                                   {job.out_attn_last, job.stats.attn_last},
                                                   {job.out_attn_window, job.stats.attn_window}};
  for (const auto& [out, source] : stats) {
    if (out == nullptr || tokens == 0) continue;
    if (source == nullptr)
      fail(KVC_ERR_INVALID_ARGUMENT, "read_tokens: a statistic is asked for but not stored");
    std::memcpy(out, source, sizeof(float) * tokens);
  }
}

}  // namespace

void run_read_tokens(const kvc_host_api& host, const kvc_read_tokens_job* jobs, size_t n_jobs) {
  std::vector<size_t> tokens(n_jobs);
  for (size_t j = 0; j < n_jobs; ++j)
    tokens[j] =
        count_tokens(jobs[j].segments, jobs[j].n_segments, "read_tokens", j, Reads::positions);
  parallel_for(host, n_jobs, 1, [&](size_t begin, size_t end) {
    for (size_t j = begin; j < end; ++j) read_tokens_job(jobs[j], tokens[j]);
  });
}

}  // namespace kvc::cpu
