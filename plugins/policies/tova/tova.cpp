// tova (Token Omission Via Attention, Oren et al. 2024): keeps the tokens the last query
// attends to most, averaged over the heads of the KV head's group (the host averages).
#include "adapter.hpp"
#include "jobs.hpp"

namespace kvc::policies {
namespace {

class Tova {
 public:
  static constexpr const char* kName = "tova";
  explicit Tova(ParamReader& /*params*/) {}

  void needs(kvc_policy_needs& needs) const noexcept { needs.stats = KVC_STAT_ATTN_LAST; }

  void score(const kvc_score_job* jobs, size_t n_jobs) const {
    for (size_t j = 0; j < n_jobs; ++j) {
      const kvc_score_job& job = jobs[j];
      check_job(job, j, KVC_STAT_ATTN_LAST);
      const float* __restrict attn = job.attn_last;
      float* __restrict scores = job.scores;
      for (int32_t i = 0; i < job.n_tokens; ++i) scores[i] = attn[i];
    }
  }
};

}  // namespace
}  // namespace kvc::policies

KVC_POLICY_PLUGIN(kvc::policies::Tova);
