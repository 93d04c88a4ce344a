// `--key=value` options of a kvc-bench subcommand.
#pragma once

#include <cstdint>
#include <map>
#include <set>
#include <string>
#include <vector>

namespace kvc_bench {

/// The options after the subcommand name. Getters mark a key as known; after reading all of
/// its options a subcommand calls reject_unknown(), so a misspelt key is an error rather than
/// a silently ignored one. Bad values throw UsageError.
class Options {
 public:
  /// Parses "--key=value" (or "--flag", meaning "--flag=1") arguments, a '-' in a key read as
  /// '_'; throws UsageError.
  explicit Options(const std::vector<std::string>& args);

  bool has(const std::string& key) const { return values_.count(key) != 0; }
  /// "--help" or "-h" was given.
  bool help() const { return help_; }

  int64_t get_int(const std::string& key, int64_t fallback, int64_t min, int64_t max);
  double get_double(const std::string& key, double fallback, double min, double max);
  std::string get_string(const std::string& key, const std::string& fallback);

  /// Throws UsageError naming every option that no getter asked for.
  void reject_unknown() const;

 private:
  const std::string* find(const std::string& key);

  std::map<std::string, std::string> values_;
  std::set<std::string> known_;
  bool help_ = false;
};

}  // namespace kvc_bench
