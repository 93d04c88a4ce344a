// knorm (Devoto et al. 2024, "A Simple and Effective L2 Norm-Based Strategy for KV Cache
// Compression"): keys with a low L2 norm draw high attention, so keep them: score = -||k||_2.
#include <cmath>

#include "adapter.hpp"
#include "jobs.hpp"
#include "key_math.hpp"

namespace kvc::policies {
namespace {

class KNorm {
 public:
  static constexpr const char* kName = "knorm";
  explicit KNorm(ParamReader& /*params*/) {}

  void needs(kvc_policy_needs& needs) const noexcept { needs.stats = KVC_STAT_KEYS; }

  void score(const kvc_score_job* jobs, size_t n_jobs) const {
    for (size_t j = 0; j < n_jobs; ++j) {
      const kvc_score_job& job = jobs[j];
      check_job(job, j, KVC_STAT_KEYS);
      const size_t dim = static_cast<size_t>(job.head_dim);
      for (int32_t i = 0; i < job.n_tokens; ++i) {
        job.scores[i] = -std::sqrt(dot(job.keys + dim * static_cast<size_t>(i),
                                       job.keys + dim * static_cast<size_t>(i), dim));
      }
    }
  }
};

}  // namespace
}  // namespace kvc::policies

KVC_POLICY_PLUGIN(kvc::policies::KNorm);
