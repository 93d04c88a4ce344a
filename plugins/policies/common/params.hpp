// Reading `policy.params` (a list of (key, text) pairs as written in YAML) into typed values.
//
// A policy asks for each key it knows, with its default and the allowed values; finish()
// then rejects keys nobody asked for. Every problem is a KVC_ERR_CONFIG Error naming
// the key, in the configuration's style:
//   policy.params.kernel: expected an odd integer >= 1, got '4'
//   policy.params.foo: unknown parameter for snapkv (known: window, kernel, pooling)
#pragma once

#include <cstdint>
#include <initializer_list>
#include <string>
#include <unordered_map>
#include <vector>

#include "kvcache/kvcache_plugin.h"

namespace kvc::policies {

class ParamReader {
 public:
  // `policy` names the policy in messages ("snapkv"). Duplicate keys are an error.
  ParamReader(std::string policy, const kvc_policy_param* params, size_t n_params);

  const std::string& policy() const { return policy_; }

  // The value of `key`, or nullptr when it is absent; marks the key as known.
  const std::string* find(const std::string& key);
  bool has(const std::string& key) const;

  // A decimal integer with an optional sign in [min, max]. `expectation` replaces the default
  // wording of the error ("an integer in min..max"); `valid` adds a check (odd, ...).
  int64_t integer(const std::string& key, int64_t fallback, int64_t min, int64_t max,
                  const char* expectation = nullptr, bool (*valid)(int64_t) = nullptr);
  // A finite number (fraction and exponent allowed) in [min, max].
  double number(const std::string& key, double fallback, double min, double max,
                const char* expectation = nullptr);
  // One of `choices`; returns its index.
  size_t choice(const std::string& key, size_t fallback, std::initializer_list<const char*> choices);
  // Any non-empty text.
  std::string text(const std::string& key, const std::string& fallback);

  // Declares keys as known without reading them (their owner checks them).
  void allow(std::initializer_list<const char*> keys);
  // Accepts every key nobody asked for: they belong to someone else (a wrapped third-party
  // scorer, which checks them itself).
  void allow_unknown() { allow_unknown_ = true; }

  // Rejects the first key nobody asked for, listing the known ones. `owner` replaces the
  // policy name in that message ("adakv with scorer snapkv").
  void finish(const std::string& owner = std::string()) const;

  // The parameters as given, in order.
  const std::vector<std::pair<std::string, std::string>>& entries() const { return entries_; }

 private:
  void know(const std::string& key);

  std::string policy_;
  std::vector<std::pair<std::string, std::string>> entries_;
  std::unordered_map<std::string, size_t> index_;  // key -> its entry: linear in the params
  std::vector<std::string> known_;
  bool allow_unknown_ = false;
};

}  // namespace kvc::policies
