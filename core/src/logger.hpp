// Routes library messages to the user's callback, or to stderr by default. Thread-safe.
#pragma once

#include <mutex>
#include <string>

#include "kvcache/kvcache.h"

namespace kvc {

class Logger {
 public:
  void set_sink(kvc_log_fn fn, void* user_data, kvc_log_level min_level);
  void log(kvc_log_level level, const std::string& message) const;

 private:
  mutable std::mutex mutex_;
  kvc_log_fn fn_ = nullptr;
  void* user_data_ = nullptr;
  kvc_log_level min_level_ = KVC_LOG_WARN;
};

}  // namespace kvc
