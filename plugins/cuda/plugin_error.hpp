// Errors inside the CUDA backend, and their translation into the plugin ABI's code + message.
#pragma once

#include <cstdarg>
#include <cstdint>
#include <cstdio>
#include <exception>
#include <new>
#include <stdexcept>
#include <string>

#include "kvcache/kvcache_plugin.h"

namespace kvc::cuda {

class PluginError : public std::runtime_error {
 public:
  PluginError(kvc_status_code code, const std::string& message)
      : std::runtime_error("cuda backend: " + message), code_(code) {}
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
    write_error(error, "cuda backend: out of host memory");
    return KVC_ERR_OUT_OF_MEMORY;
  } catch (const std::exception& e) {
    write_error(error, e.what());
    return KVC_ERR_INTERNAL;
  } catch (...) {
    write_error(error, "cuda backend: unknown exception");
    return KVC_ERR_INTERNAL;
  }
}

}  // namespace kvc::cuda
