// window: keeps the most recent tokens (score = position).
#include "adapter.hpp"
#include "position_score.hpp"

namespace kvc::policies {
namespace {

class Window {
 public:
  static constexpr const char* kName = "window";
  explicit Window(ParamReader& /*params*/) {}

  void needs(kvc_policy_needs& /*needs*/) const noexcept {}

  void score(const kvc_score_job* jobs, size_t n_jobs) const { score_by_position(jobs, n_jobs); }
};

}  // namespace
}  // namespace kvc::policies

KVC_POLICY_PLUGIN(kvc::policies::Window);
