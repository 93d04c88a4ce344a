// Routes library messages to the user's callback, or to stderr by default. Thread-safe.
#pragma once

#include <condition_variable>
#include <mutex>
#include <string>

#include "kvcache/kvcache.h"

namespace kvc {

class Logger {
 public:
  // Returns once no other thread is still inside the previous callback, so that its
  // user_data may be freed; the callback itself may call it (it does not wait for itself).
  void set_sink(kvc_log_fn fn, void* user_data, kvc_log_level min_level);
  // Calls the callback without holding the logger: callbacks may log, set the logger and run
  // concurrently (kvcache.h).
  void log(kvc_log_level level, const std::string& message) const;

 private:
  mutable std::mutex mutex_;
  mutable std::condition_variable idle_;
  mutable int in_callback_ = 0;  // calls of a callback running now, on any thread
  int parked_ = 0;               // of those, the ones whose thread waits in set_sink
  kvc_log_fn fn_ = nullptr;
  void* user_data_ = nullptr;
  kvc_log_level min_level_ = KVC_LOG_WARN;
};

}  // namespace kvc
