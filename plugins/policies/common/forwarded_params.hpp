// The parameters a budget-only policy (pyramidkv, adakv) hands on to its scorer: its own
// parameters minus the keys that are its own, kept alive for kvc_policy_needs::scorer_params.
#pragma once

#include <initializer_list>
#include <string>
#include <utility>
#include <vector>

#include "kvcache/kvcache_plugin.h"

namespace kvc::policies {

class ForwardedParams {
 public:
  ForwardedParams(const std::vector<std::pair<std::string, std::string>>& entries,
                  std::initializer_list<const char*> own_keys);
  ForwardedParams(const ForwardedParams&) = delete;
  ForwardedParams& operator=(const ForwardedParams&) = delete;

  void fill(kvc_policy_needs& needs) const noexcept {
    needs.scorer_params = params_.data();
    needs.n_scorer_params = params_.size();
  }

 private:
  std::vector<std::pair<std::string, std::string>> entries_;
  std::vector<kvc_policy_param> params_;  // points into entries_
};

}  // namespace kvc::policies
