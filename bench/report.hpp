// `name=value` lines on stdout: the output format of every kvc-bench subcommand.
#pragma once

#include <cinttypes>
#include <cstdint>
#include <cstdio>
#include <string>
#include <type_traits>

namespace kvc_bench {

inline void report(const std::string& name, const std::string& value) {
  std::printf("%s=%s\n", name.c_str(), value.c_str());
  std::fflush(stdout);
}
inline void report(const std::string& name, const char* value) { report(name, std::string(value)); }
/// Floating-point values: 6 significant digits.
inline void report(const std::string& name, double value) {
  std::printf("%s=%.6g\n", name.c_str(), value);
  std::fflush(stdout);
}
/// Integral values print exactly.
template <typename T, typename = std::enable_if_t<std::is_integral_v<T>>>
inline void report(const std::string& name, T value) {
  if constexpr (std::is_signed_v<T>) {
    std::printf("%s=%" PRId64 "\n", name.c_str(), static_cast<int64_t>(value));
  } else {
    std::printf("%s=%" PRIu64 "\n", name.c_str(), static_cast<uint64_t>(value));
  }
  std::fflush(stdout);
}

}  // namespace kvc_bench
