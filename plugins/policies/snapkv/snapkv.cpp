// snapkv (Li et al. 2024): each token's attention from the observation window (the last
// `window` queries), pooled over neighbouring tokens (`kernel`, max or avg) so that kept
// tokens keep their context. The window itself is always kept (default_recent = window).
#include "adapter.hpp"
#include "jobs.hpp"
#include "options.hpp"

namespace kvc::policies {
namespace {

class SnapKv {
 public:
  static constexpr const char* kName = "snapkv";
  explicit SnapKv(ParamReader& params) : options_(SnapKvOptions::read(params)) {}

  void needs(kvc_policy_needs& needs) const noexcept {
    needs.stats = KVC_STAT_ATTN_WINDOW;
    needs.observation_window = options_.window;
    needs.default_recent = options_.window;
  }

  void score(const kvc_score_job* jobs, size_t n_jobs) const {
    for (size_t j = 0; j < n_jobs; ++j) {
      const kvc_score_job& job = jobs[j];
      check_job(job, j, KVC_STAT_ATTN_WINDOW);
      pool(job.attn_window, job.scores, job.n_tokens, options_.kernel, options_.pooling);
    }
  }

 private:
  SnapKvOptions options_;
};

}  // namespace
}  // namespace kvc::policies

KVC_POLICY_PLUGIN(kvc::policies::SnapKv);
