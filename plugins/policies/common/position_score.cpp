#include "position_score.hpp"

#include "jobs.hpp"

namespace kvc::policies {

void score_by_position(const kvc_score_job* jobs, size_t n_jobs) {
  for (size_t j = 0; j < n_jobs; ++j) {
    const kvc_score_job& job = jobs[j];
    check_job(job, j, 0);
    const int32_t* __restrict pos = job.pos;
    float* __restrict scores = job.scores;
    for (int32_t i = 0; i < job.n_tokens; ++i) scores[i] = static_cast<float>(pos[i]);
  }
}

}  // namespace kvc::policies
