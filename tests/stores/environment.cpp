#include "environment.hpp"

#include <stdlib.h>
#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <random>
#include <stdexcept>
#include <system_error>

namespace kvc::store_tests {

Environment::Environment(const std::string& plugin_path, Params params)
    : plugin_(plugin_path), params_(std::move(params)) {
  std::random_device random;
  char prefix[64];
  std::snprintf(prefix, sizeof prefix, "kvc-test-%ld-%08x%08x/", static_cast<long>(getpid()),
                random(), random());
  key_prefix_ = prefix;
}

Environment::~Environment() {
  std::error_code ignored;
  for (const std::string& folder : folders_) std::filesystem::remove_all(folder, ignored);
}

Params Environment::fresh_params() {
  Params params = params_;
  for (auto& entry : params) {
    if (entry.second == "@tmp") entry.second = temp_folder();
  }
  return params;
}

std::string Environment::temp_folder() {
  const std::string base = std::filesystem::temp_directory_path() / "kvc-store-tests-XXXXXX";
  std::vector<char> name(base.begin(), base.end());
  name.push_back('\0');
  if (mkdtemp(name.data()) == nullptr) throw std::runtime_error("mkdtemp failed for " + base);
  folders_.emplace_back(name.data());
  return folders_.back();
}

}  // namespace kvc::store_tests
