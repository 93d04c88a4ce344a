// A cache's eviction policy: the plugin instance that scores tokens and, for policies that
// only set budgets (Ada-KV, PyramidKV), the scorer plugin instance they wrap.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "config.hpp"
#include "kvcache/kvcache_plugin.h"
#include "plugin_registry.hpp"

namespace kvc {

class PolicyInstance {
 public:
  PolicyInstance(const LoadedPlugin& plugin, const kvc_host_api* host,
                 const std::vector<std::pair<std::string, std::string>>& params);
  ~PolicyInstance();
  PolicyInstance(const PolicyInstance&) = delete;
  PolicyInstance& operator=(const PolicyInstance&) = delete;

  const std::string& name() const { return name_; }
  const kvc_policy_vtable& vtable() const { return vtable_; }
  void* instance() const { return instance_; }
  kvc_policy_needs needs() const;
  void check(int32_t code, const kvc_plugin_error& error, const char* what) const;

 private:
  std::string name_;
  kvc_policy_vtable vtable_;
  void* instance_ = nullptr;
};

class Policy {
 public:
  Policy(PluginRegistry& registry, const kvc_host_api* host, const PolicyConfig& config);

  const PolicyConfig& config() const { return config_; }
  uint32_t stats() const { return stats_; }
  int32_t observation_window() const { return observation_window_; }
  // False for a policy that never scores (full): compression only applies budgets.
  bool scores() const { return scorer_->vtable().score != nullptr; }

  // Fills every job's scores (all KV heads of one (sequence, layer)).
  void score(kvc_score_job* jobs, size_t n_jobs) const;
  // The budget of each head of one (sequence, layer), given the configured ones.
  void budgets(const kvc_budget_request& request, int32_t* budgets) const;

 private:
  PolicyConfig config_;
  std::unique_ptr<PolicyInstance> main_;
  std::unique_ptr<PolicyInstance> wrapped_scorer_;
  const PolicyInstance* scorer_ = nullptr;
  uint32_t stats_ = 0;
  int32_t observation_window_ = 0;
};

}  // namespace kvc
