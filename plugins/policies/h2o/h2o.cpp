// h2o (Heavy-Hitter Oracle, Zhang et al. 2023): heavy hitters by accumulated attention plus a
// recent window. The paper splits the budget half heavy, half recent: the last
// floor(recent_ratio * budget) tokens score +inf, the others their accumulated attention.
#include <cmath>

#include "adapter.hpp"
#include "jobs.hpp"
#include "options.hpp"

namespace kvc::policies {
namespace {

class H2o {
 public:
  static constexpr const char* kName = "h2o";
  explicit H2o(ParamReader& params) : options_(H2oOptions::read(params)) {}

  void needs(kvc_policy_needs& needs) const noexcept { needs.stats = KVC_STAT_ATTN_SUM; }

  void score(const kvc_score_job* jobs, size_t n_jobs) const {
    for (size_t j = 0; j < n_jobs; ++j) {
      const kvc_score_job& job = jobs[j];
      check_job(job, j, KVC_STAT_ATTN_SUM);
      const int32_t n = job.n_tokens;
      const double wanted = std::floor(options_.recent_ratio * static_cast<double>(job.budget));
      const int32_t recent = wanted >= n ? n : wanted <= 0 ? 0 : static_cast<int32_t>(wanted);
      const float* __restrict attn = job.attn_sum;
      float* __restrict scores = job.scores;
      for (int32_t i = 0; i < n - recent; ++i) scores[i] = attn[i];
      for (int32_t i = n - recent; i < n; ++i) scores[i] = INFINITY;
    }
  }

 private:
  H2oOptions options_;
};

}  // namespace
}  // namespace kvc::policies

KVC_POLICY_PLUGIN(kvc::policies::H2o);
