// streaming (StreamingLLM, Xiao et al. 2023): attention sinks plus a recent window. The host
// protects the first `sinks` tokens (4 by default, the paper's 4 initial tokens); the rest of
// the budget holds the most recent tokens (score = position).
#include "adapter.hpp"
#include "position_score.hpp"

namespace kvc::policies {
namespace {

class Streaming {
 public:
  static constexpr const char* kName = "streaming";
  explicit Streaming(ParamReader& /*params*/) {}

  void needs(kvc_policy_needs& needs) const noexcept { needs.default_sinks = 4; }

  void score(const kvc_score_job* jobs, size_t n_jobs) const { score_by_position(jobs, n_jobs); }
};

}  // namespace
}  // namespace kvc::policies

KVC_POLICY_PLUGIN(kvc::policies::Streaming);
