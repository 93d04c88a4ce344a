// full: never evicts. No scores; every head's budget is unlimited.
#include <cstdint>

#include "adapter.hpp"

namespace kvc::policies {
namespace {

class Full {
 public:
  static constexpr const char* kName = "full";
  explicit Full(ParamReader& /*params*/) {}

  void needs(kvc_policy_needs& /*needs*/) const noexcept {}

  void budgets(const kvc_budget_request& request, int32_t* budgets) const {
    for (int32_t h = 0; h < request.n_heads; ++h) budgets[h] = INT32_MAX;
  }
};

}  // namespace
}  // namespace kvc::policies

KVC_POLICY_PLUGIN(kvc::policies::Full);
