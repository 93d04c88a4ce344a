/**
 * @file kvcache_error.hpp
 * @brief The one exception type inside kvcache and its plugins (header-only): a
 * ::kvc_status_code and a message. It never crosses the C ABI: the library turns it into a
 * kvc_status, a plugin into the status code and kvc_plugin_error of its call
 * (kvc::plugin::report_errors in kvcache_plugin_support.hpp). The C++ wrapper (kvcache.hpp)
 * throws it, as kvcache::Error, on the caller's side for a failed call's status.
 */
#ifndef KVCACHE_KVCACHE_ERROR_HPP
#define KVCACHE_KVCACHE_ERROR_HPP

#include <stdexcept>
#include <string>

#include "kvcache/kvcache.h"

namespace kvc {

/** @brief An error: its status code and message. */
class Error : public std::runtime_error {
 public:
  /** @brief An error with a status code and a message. */
  Error(kvc_status_code code, const std::string& message)
      : std::runtime_error(message), code_(code) {}
  /** @brief The status code. */
  kvc_status_code code() const noexcept { return code_; }

 private:
  kvc_status_code code_;
};

}  // namespace kvc

#endif  // KVCACHE_KVCACHE_ERROR_HPP
