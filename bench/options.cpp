#include "options.hpp"

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdlib>

#include "common.hpp"

namespace kvc_bench {

Options::Options(const std::vector<std::string>& args) {
  for (const std::string& arg : args) {
    if (arg == "--help" || arg == "-h") {
      help_ = true;
      continue;
    }
    if (arg.size() < 3 || arg.compare(0, 2, "--") != 0) {
      throw UsageError("expected --key=value, got '" + arg + "'");
    }
    const size_t eq = arg.find('=');
    std::string key = arg.substr(2, eq == std::string::npos ? std::string::npos : eq - 2);
    // --k-format is --k_format: kvc-llama's options are written with '-', kvc-bench's with
    // '_'; either is taken here.
    std::replace(key.begin(), key.end(), '-', '_');
    std::string value = eq == std::string::npos ? "1" : arg.substr(eq + 1);
    if (key.empty()) throw UsageError("empty option name in '" + arg + "'");
    if (values_.count(key) != 0) throw UsageError("option --" + key + " given twice");
    values_.emplace(std::move(key), std::move(value));
  }
}

const std::string* Options::find(const std::string& key) {
  known_.insert(key);
  auto it = values_.find(key);
  return it == values_.end() ? nullptr : &it->second;
}

int64_t Options::get_int(const std::string& key, int64_t fallback, int64_t min, int64_t max) {
  const std::string* text = find(key);
  if (text == nullptr) return fallback;
  errno = 0;
  char* end = nullptr;
  const long long value = std::strtoll(text->c_str(), &end, 10);
  if (text->empty() || *end != '\0' || errno == ERANGE) {
    throw UsageError("--" + key + ": expected an integer, got '" + *text + "'");
  }
  if (value < min || value > max) {
    throw UsageError("--" + key + ": " + *text + " is outside [" + std::to_string(min) + ", " +
                     std::to_string(max) + "]");
  }
  return value;
}

double Options::get_double(const std::string& key, double fallback, double min, double max) {
  const std::string* text = find(key);
  if (text == nullptr) return fallback;
  errno = 0;
  char* end = nullptr;
  const double value = std::strtod(text->c_str(), &end);
  if (text->empty() || *end != '\0' || errno == ERANGE || !std::isfinite(value)) {
    throw UsageError("--" + key + ": expected a number, got '" + *text + "'");
  }
  if (value < min || value > max) {
    throw UsageError("--" + key + ": " + *text + " is outside [" + std::to_string(min) + ", " +
                     std::to_string(max) + "]");
  }
  return value;
}

std::string Options::get_string(const std::string& key, const std::string& fallback) {
  const std::string* text = find(key);
  return text == nullptr ? fallback : *text;
}

void Options::reject_unknown() const {
  std::string unknown;
  for (const auto& kv : values_) {
    if (known_.count(kv.first) == 0) unknown += (unknown.empty() ? "--" : ", --") + kv.first;
  }
  if (!unknown.empty()) throw UsageError("unknown option(s): " + unknown);
}

}  // namespace kvc_bench
