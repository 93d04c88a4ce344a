#include "params.hpp"

#include <algorithm>
#include <cerrno>
#include <cinttypes>
#include <cmath>
#include <cstdio>
#include <cstdlib>

#include "errors.hpp"

namespace kvc::policies {

void config_error(const std::string& key, const std::string& problem) {
  throw Error(KVC_ERR_CONFIG, "policy.params." + key + ": " + problem);
}

void argument_error(const std::string& message) {
  throw Error(KVC_ERR_INVALID_ARGUMENT, message);
}

namespace {

std::string format_int(int64_t value) {
  char text[32];
  std::snprintf(text, sizeof text, "%" PRId64, value);
  return text;
}

std::string format_number(double value) {
  char text[32];
  std::snprintf(text, sizeof text, "%g", value);
  return text;
}

[[noreturn]] void expected(const std::string& key, const std::string& what,
                           const std::string& got) {
  config_error(key, "expected " + what + ", got '" + got + "'");
}

// Decimal digits with an optional sign, as the YAML configuration writes integers.
bool parse_int(const std::string& text, int64_t& out) {
  size_t i = (!text.empty() && (text[0] == '+' || text[0] == '-')) ? 1 : 0;
  if (i == text.size()) return false;
  for (size_t j = i; j < text.size(); ++j) {
    if (text[j] < '0' || text[j] > '9') return false;
  }
  errno = 0;
  char* end = nullptr;
  long long value = std::strtoll(text.c_str(), &end, 10);
  if (errno == ERANGE || end != text.c_str() + text.size()) return false;
  out = static_cast<int64_t>(value);
  return true;
}

// A finite decimal number: sign, digits, fraction, exponent; no hex, inf or nan.
bool parse_number(const std::string& text, double& out) {
  if (text.empty()) return false;
  for (char c : text) {
    bool ok = (c >= '0' && c <= '9') || c == '+' || c == '-' || c == '.' || c == 'e' || c == 'E';
    if (!ok) return false;
  }
  errno = 0;
  char* end = nullptr;
  double value = std::strtod(text.c_str(), &end);
  if (end != text.c_str() + text.size() || !std::isfinite(value)) return false;
  out = value;
  return true;
}

}  // namespace

ParamReader::ParamReader(std::string policy, const kvc_policy_param* params, size_t n_params)
    : policy_(std::move(policy)) {
  if (n_params > 0 && params == nullptr) argument_error("params is NULL but n_params > 0");
  for (size_t i = 0; i < n_params; ++i) {
    if (params[i].key == nullptr || params[i].key[0] == '\0') {
      argument_error("parameter " + format_int(static_cast<int64_t>(i)) + " has no key");
    }
    std::string key = params[i].key;
    if (!index_.emplace(key, entries_.size()).second) config_error(key, "given twice");
    entries_.emplace_back(std::move(key), params[i].value ? params[i].value : "");
  }
}

bool ParamReader::has(const std::string& key) const { return index_.count(key) != 0; }

void ParamReader::know(const std::string& key) {
  if (std::find(known_.begin(), known_.end(), key) == known_.end()) known_.push_back(key);
}

void ParamReader::allow(std::initializer_list<const char*> keys) {
  for (const char* key : keys) know(key);
}

const std::string* ParamReader::find(const std::string& key) {
  know(key);
  const auto found = index_.find(key);
  return found == index_.end() ? nullptr : &entries_[found->second].second;
}

int64_t ParamReader::integer(const std::string& key, int64_t fallback, int64_t min, int64_t max,
                             const char* expectation, bool (*valid)(int64_t)) {
  const std::string* text = find(key);
  if (text == nullptr) return fallback;
  int64_t value = 0;
  if (!parse_int(*text, value) || value < min || value > max || (valid && !valid(value))) {
    std::string what;
    if (expectation != nullptr) {
      what = expectation;
    } else if (max == INT64_MAX) {
      what = "an integer >= " + format_int(min);
    } else {
      what = "an integer in " + format_int(min) + ".." + format_int(max);
    }
    expected(key, what, *text);
  }
  return value;
}

double ParamReader::number(const std::string& key, double fallback, double min, double max,
                           const char* expectation) {
  const std::string* text = find(key);
  if (text == nullptr) return fallback;
  double value = 0.0;
  if (!parse_number(*text, value) || value < min || value > max) {
    std::string what = expectation != nullptr
                           ? std::string(expectation)
                           : "a number in [" + format_number(min) + ", " + format_number(max) + "]";
    expected(key, what, *text);
  }
  return value;
}

size_t ParamReader::choice(const std::string& key, size_t fallback,
                           std::initializer_list<const char*> choices) {
  const std::string* text = find(key);
  if (text == nullptr) return fallback;
  size_t index = 0;
  std::string list;
  for (const char* option : choices) {
    if (*text == option) return index;
    list += (index++ == 0 ? "" : ", ");
    list += option;
  }
  expected(key, "one of " + list, *text);
}

std::string ParamReader::text(const std::string& key, const std::string& fallback) {
  const std::string* text = find(key);
  if (text == nullptr) return fallback;
  if (text->empty()) expected(key, "a non-empty name", *text);
  return *text;
}

void ParamReader::finish(const std::string& owner) const {
  if (allow_unknown_) return;
  for (const auto& entry : entries_) {
    if (std::find(known_.begin(), known_.end(), entry.first) != known_.end()) continue;
    std::string list;
    for (const std::string& key : known_) list += (list.empty() ? "" : ", ") + key;
    const std::string& who = owner.empty() ? policy_ : owner;
    config_error(entry.first, "unknown parameter for " + who +
                                  (list.empty() ? " (it takes no parameters)"
                                                : " (known: " + list + ")"));
  }
}

}  // namespace kvc::policies
