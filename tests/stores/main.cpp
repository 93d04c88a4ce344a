// kvc-store-tests: the store conformance cases (and those of the plugin's own suite, chosen
// with doctest's --test-suite) run against the plugin named on the command line; see
// environment.hpp.
#define DOCTEST_CONFIG_IMPLEMENT
#include <doctest/doctest.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "environment.hpp"

namespace kvc::store_tests {
namespace {

constexpr int kSkipped = 77;

std::unique_ptr<Environment> the_environment;

// "@env:NAME", "@env-host:NAME" or "@env-port:NAME" (the parts of a NAME=host:port).
struct EnvironmentValue {
  std::string variable;
  std::string (*part)(const std::string& value);
};

std::optional<EnvironmentValue> environment_value(const std::string& text) {
  static const std::pair<const char*, std::string (*)(const std::string&)> kForms[] = {
      {"@env:", [](const std::string& value) { return value; }},
      {"@env-host:", [](const std::string& value) { return value.substr(0, value.rfind(':')); }},
      {"@env-port:",
       [](const std::string& value) {
         const size_t colon = value.rfind(':');
         return colon == std::string::npos ? std::string() : value.substr(colon + 1);
       }},
  };
  for (const auto& [prefix, part] : kForms) {
    const size_t length = std::strlen(prefix);
    if (text.compare(0, length, prefix) == 0) return EnvironmentValue{text.substr(length), part};
  }
  return std::nullopt;
}

[[noreturn]] void usage(const char* problem) {
  std::fprintf(stderr,
               "kvc-store-tests: %s\nusage: kvc-store-tests --plugin <file.so> "
               "[--param <key>=<value>]... [--skip-if-absent] [doctest options]\n",
               problem);
  std::exit(2);
}

}  // namespace

Environment& environment() { return *the_environment; }

}  // namespace kvc::store_tests

int main(int argc, char** argv) {
  using namespace kvc::store_tests;
  std::string plugin_path;
  Params params;
  bool skip_if_absent = false;
  std::vector<char*> doctest_args{argv[0]};
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    if (arg == "--plugin" && i + 1 < argc) {
      plugin_path = argv[++i];
    } else if (arg == "--param" && i + 1 < argc) {
      const std::string pair = argv[++i];
      const size_t equals = pair.find('=');
      if (equals == std::string::npos) usage("a --param needs <key>=<value>");
      std::string value = pair.substr(equals + 1);
      if (const std::optional<EnvironmentValue> wanted = environment_value(value)) {
        const char* from_environment = std::getenv(wanted->variable.c_str());
        if (from_environment == nullptr || from_environment[0] == '\0') {
          std::printf("skipped: %s is not set\n", wanted->variable.c_str());
          return kSkipped;
        }
        value = wanted->part(from_environment);
      }
      params.emplace_back(pair.substr(0, equals), value);
    } else if (arg == "--skip-if-absent") {
      skip_if_absent = true;
    } else {
      doctest_args.push_back(argv[i]);
    }
  }
  if (plugin_path.empty()) usage("--plugin is required");
  if (skip_if_absent && !std::filesystem::exists(plugin_path)) {
    std::printf("skipped: %s was not built\n", plugin_path.c_str());
    return kSkipped;
  }
  try {
    the_environment = std::make_unique<Environment>(plugin_path, std::move(params));
  } catch (const std::exception& e) {
    std::fprintf(stderr, "kvc-store-tests: %s\n", e.what());
    return 1;
  }
  doctest::Context context(static_cast<int>(doctest_args.size()), doctest_args.data());
  const int result = context.run();
  the_environment.reset();
  return result;
}
