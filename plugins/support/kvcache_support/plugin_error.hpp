// Errors inside a backend plugin, and their translation into the plugin ABI's code + message.
// Header-only and shared by the in-tree backends (a plugin links no code of the core); each
// plugin defines plugin_label(), the prefix of its messages ("cpu backend").
#pragma once

#include <cstdarg>
#include <cstdint>
#include <cstdio>
#include <exception>
#include <new>
#include <stdexcept>
#include <string>

#include "kvcache/kvcache_plugin.h"

namespace kvc::plugin {

// Defined once by each plugin.
const char* plugin_label();

class PluginError : public std::runtime_error {
 public:
  PluginError(kvc_status_code code, const std::string& message)
      : std::runtime_error(std::string(plugin_label()) + ": " + message), code_(code) {}
  kvc_status_code code() const noexcept { return code_; }

 private:
  kvc_status_code code_;
};

// printf-style rather than std::to_string: libstdc++'s to_string drags a GNU-unique symbol
// into the dynamic symbol table, which would export more than the entry point.
[[noreturn]] __attribute__((format(printf, 2, 3))) inline void fail(kvc_status_code code,
                                                                    const char* format, ...) {
  char message[256];
  va_list args;
  va_start(args, format);
  std::vsnprintf(message, sizeof message, format, args);
  va_end(args);
  throw PluginError(code, message);
}

inline void write_error(kvc_plugin_error* error, const char* message) noexcept {
  if (error != nullptr) std::snprintf(error->message, sizeof error->message, "%s", message);
}

// With the plugin's label, allocating nothing (it may report that memory ran out).
inline void write_labelled_error(kvc_plugin_error* error, const char* message) noexcept {
  if (error != nullptr) {
    std::snprintf(error->message, sizeof error->message, "%s: %s", plugin_label(), message);
  }
}

// Runs body and turns any exception into a status code, so none crosses the C ABI.
template <class Body>
int32_t report_errors(kvc_plugin_error* error, Body&& body) noexcept {
  try {
    body();
    return KVC_OK;
  } catch (const PluginError& e) {
    write_error(error, e.what());
    return e.code();
  } catch (const std::bad_alloc&) {
    write_labelled_error(error, "out of host memory");
    return KVC_ERR_OUT_OF_MEMORY;
  } catch (const std::exception& e) {
    write_error(error, e.what());
    return KVC_ERR_INTERNAL;
  } catch (...) {
    write_labelled_error(error, "unknown exception");
    return KVC_ERR_INTERNAL;
  }
}

}  // namespace kvc::plugin
