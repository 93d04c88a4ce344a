// `name=value` lines on stdout: the output format of every kvc-bench subcommand; with
// `--json` (main.cpp) the same values are kept and printed as one JSON object at the end.
#pragma once

#include <cinttypes>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

namespace kvc_bench {

/// The values reported so far when the output is JSON (`enabled`).
struct JsonReport {
  bool enabled = false;
  std::vector<std::pair<std::string, std::string>> fields;  // name, JSON literal

  static JsonReport& get() {
    static JsonReport report;
    return report;
  }
  static std::string quoted(const std::string& text) {
    std::string out = "\"";
    for (const char c : text) {
      if (c == '"' || c == '\\') {
        out += '\\';
        out += c;
      } else if (static_cast<unsigned char>(c) < 0x20) {
        char escape[8];
        std::snprintf(escape, sizeof escape, "\\u%04x", static_cast<unsigned>(c));
        out += escape;
      } else {
        out += c;
      }
    }
    return out + "\"";
  }
  /// The fields as one JSON object.
  std::string object() const {
    std::string out = "{";
    for (size_t i = 0; i < fields.size(); ++i)
      out += (i ? ", " : "") + quoted(fields[i].first) + ": " + fields[i].second;
    return out + "}";
  }
};

/// argv[first, argc) less `--json`, which turns the JSON output on.
inline std::vector<std::string> arguments_taking_json(int first, int argc, char** argv) {
  std::vector<std::string> args;
  for (int i = first; i < argc; ++i) {
    if (std::string(argv[i]) == "--json")
      JsonReport::get().enabled = true;
    else
      args.emplace_back(argv[i]);
  }
  return args;
}

/// Prints the JSON object of the values reported, when the output is JSON.
inline void finish_report() {
  if (JsonReport::get().enabled) std::printf("%s\n", JsonReport::get().object().c_str());
}

/// After a step failed, with --json: the values reported before it and the error.
inline void finish_failed_report(const std::string& error) {
  JsonReport& json = JsonReport::get();
  if (!json.enabled) return;
  json.fields.emplace_back("error", JsonReport::quoted(error));
  finish_report();
}

/// One value: `text` on a name=value line, or `literal` in the JSON object.
inline void emit(const std::string& name, const std::string& text, const std::string& literal) {
  JsonReport& json = JsonReport::get();
  if (json.enabled) {
    json.fields.emplace_back(name, literal);
    return;
  }
  std::printf("%s=%s\n", name.c_str(), text.c_str());
  std::fflush(stdout);
}

inline void report(const std::string& name, const std::string& value) {
  emit(name, value, JsonReport::quoted(value));
}
inline void report(const std::string& name, const char* value) { report(name, std::string(value)); }
/// Floating-point values: 6 significant digits (null in JSON when not finite).
inline void report(const std::string& name, double value) {
  char text[32];
  std::snprintf(text, sizeof text, "%.6g", value);
  emit(name, text, std::isfinite(value) ? text : "null");
}
/// Integral values print exactly.
template <typename T, typename = std::enable_if_t<std::is_integral_v<T>>>
inline void report(const std::string& name, T value) {
  char text[32];
  if constexpr (std::is_signed_v<T>) {
    std::snprintf(text, sizeof text, "%" PRId64, static_cast<int64_t>(value));
  } else {
    std::snprintf(text, sizeof text, "%" PRIu64, static_cast<uint64_t>(value));
  }
  emit(name, text, text);
}

}  // namespace kvc_bench
