#include "policy.hpp"

#include <algorithm>
#include <cstring>

#include "kvcache/kvcache_error.hpp"
#include "quote.hpp"

namespace kvc {
namespace {

const LoadedPlugin& find_policy(PluginRegistry& registry, const std::string& name) {
  const LoadedPlugin* plugin = registry.find(KVC_PLUGIN_POLICY, name);
  if (!plugin) {
    throw Error(KVC_ERR_NOT_FOUND, "policy " + quote(name) + " is not loaded (loaded policies: " +
                                       registry.names_of(KVC_PLUGIN_POLICY) + ")");
  }
  return *plugin;
}

std::vector<std::pair<std::string, std::string>> without_key(
    const std::vector<std::pair<std::string, std::string>>& params, const std::string& key) {
  std::vector<std::pair<std::string, std::string>> rest;
  for (const auto& p : params) {
    if (p.first != key) rest.push_back(p);
  }
  return rest;
}

}  // namespace

PolicyInstance::PolicyInstance(const LoadedPlugin& plugin, const kvc_host_api* host,
                               const std::vector<std::pair<std::string, std::string>>& params)
    : name_(plugin.name), vtable_(plugin.policy) {
  std::vector<kvc_policy_param> c_params;
  for (const auto& p : params) c_params.push_back({p.first.c_str(), p.second.c_str()});
  kvc_plugin_error error{};
  check(vtable_.create(host, c_params.data(), c_params.size(), &instance_, &error), error,
        "parameters");
}

PolicyInstance::~PolicyInstance() { vtable_.destroy(instance_); }

kvc_policy_needs PolicyInstance::needs() const {
  kvc_policy_needs needs{};
  needs.struct_size = sizeof(needs);
  vtable_.needs(instance_, &needs);
  return needs;
}

void PolicyInstance::check(int32_t code, const kvc_plugin_error& error, const char* what) const {
  check_plugin_call(code, error, "policy " + quote(name_), what);
}

Policy::Policy(PluginRegistry& registry, const kvc_host_api* host, const PolicyConfig& config)
    : config_(config) {
  main_ = std::make_unique<PolicyInstance>(find_policy(registry, config.name), host, config.params);
  kvc_policy_needs needs = main_->needs();
  scorer_ = main_.get();
  if (needs.scorer && *needs.scorer) {
    std::string scorer_name = needs.scorer;
    if (scorer_name == config.name) {
      throw Error(KVC_ERR_CONFIG,
                  "policy " + quote(config.name) + " cannot wrap itself as scorer");
    }
    std::vector<std::pair<std::string, std::string>> scorer_params;
    if (needs.scorer_params) {
      for (size_t i = 0; i < needs.n_scorer_params; ++i) {
        const kvc_policy_param& param = needs.scorer_params[i];
        if (!param.key || !param.value) {
          throw Error(KVC_ERR_INVALID_ARGUMENT,
                      "policy " + quote(config.name) + " forwards scorer parameter " +
                          std::to_string(i) + " with a NULL " + (param.key ? "value" : "key"));
        }
        scorer_params.emplace_back(param.key, param.value);
      }
    } else {
      scorer_params = without_key(config.params, "scorer");
    }
    wrapped_scorer_ = std::make_unique<PolicyInstance>(find_policy(registry, scorer_name), host,
                                                       scorer_params);
    scorer_ = wrapped_scorer_.get();
    needs = scorer_->needs();
  }
  // Defaults are facts of the policy that scores (a wrapper gets its scorer's).
  if (config_.sinks < 0) config_.sinks = std::max(needs.default_sinks, 0);
  if (config_.recent < 0) config_.recent = std::max(needs.default_recent, 0);
  if (scores() && config_.budget_tokens <= 0 && config_.budget_ratio <= 0.0) {
    throw Error(KVC_ERR_CONFIG,
                "policy " + quote(config_.name) + " needs a budget (policy.budget)");
  }
  stats_ = needs.stats;
  observation_window_ = needs.observation_window;
  if ((stats_ & KVC_STAT_ATTN_WINDOW) && observation_window_ < 1) {
    throw Error(KVC_ERR_PLUGIN, "policy " + quote(scorer_->name()) +
                                    " asks for window attention with an observation window < 1");
  }
}

void Policy::score(kvc_score_job* jobs, size_t n_jobs) const {
  kvc_plugin_error error{};
  scorer_->check(scorer_->vtable().score(scorer_->instance(), jobs, n_jobs, &error), error,
                 "score");
}

void Policy::budgets(const kvc_budget_request& request, int32_t* budgets) const {
  if (!main_->vtable().budgets) {
    std::memcpy(budgets, request.configured, sizeof(int32_t) * static_cast<size_t>(request.n_heads));
    return;
  }
  kvc_plugin_error error{};
  main_->check(main_->vtable().budgets(main_->instance(), &request, budgets, &error), error,
               "budgets");
}

}  // namespace kvc
