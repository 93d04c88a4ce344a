/**
 * @file kvcache_error.hpp
 * @brief The one exception type inside kvcache and its plugins (header-only): a
 * ::kvc_status_code and a message. It never crosses the C ABI: the library turns it into a
 * kvc_status, a plugin into the status code and kvc_plugin_error of its call
 * (kvc::plugin::report_errors in kvcache_plugin_support.hpp). Users of the C++ wrapper see
 * kvcache::Error (kvcache.hpp) instead.
 */
#ifndef KVCACHE_KVCACHE_ERROR_HPP
#define KVCACHE_KVCACHE_ERROR_HPP

#include <stdexcept>
#include <string>

#include "kvcache/kvcache.h"

/** @cond internal */
namespace kvc {

class Error : public std::runtime_error {
 public:
  Error(kvc_status_code code, const std::string& message)
      : std::runtime_error(message), code_(code) {}
  kvc_status_code code() const noexcept { return code_; }

 private:
  kvc_status_code code_;
};

}  // namespace kvc
/** @endcond */

#endif  // KVCACHE_KVCACHE_ERROR_HPP
