#include "logger.hpp"

#include <algorithm>
#include <cstdio>
#include <vector>

namespace kvc {
namespace {

const char* level_name(kvc_log_level level) {
  switch (level) {
    case KVC_LOG_DEBUG: return "debug";
    case KVC_LOG_INFO: return "info";
    case KVC_LOG_WARN: return "warning";
    case KVC_LOG_ERROR: return "error";
    default: return "log";
  }
}

// The loggers whose callback this thread is inside, innermost last.
thread_local std::vector<const Logger*> t_inside;

}  // namespace

void Logger::set_sink(kvc_log_fn fn, void* user_data, kvc_log_level min_level) {
  std::unique_lock<std::mutex> lock(mutex_);
  fn_ = fn;
  user_data_ = fn ? user_data : nullptr;
  min_level_ = fn ? min_level : KVC_LOG_WARN;
  // Wait for the calls of other threads, but not for this thread's own (a callback setting
  // the logger), nor for those of threads that wait here too from inside a callback.
  const int mine = static_cast<int>(std::count(t_inside.begin(), t_inside.end(), this));
  parked_ += mine;
  idle_.wait(lock, [&] { return in_callback_ == parked_; });
  parked_ -= mine;
}

void Logger::log(kvc_log_level level, const std::string& message) const {
  kvc_log_fn fn = nullptr;
  void* user_data = nullptr;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    if (level < min_level_ || level >= KVC_LOG_OFF) return;
    fn = fn_;
    user_data = user_data_;
    if (fn) ++in_callback_;
  }
  if (!fn) {
    std::fprintf(stderr, "kvcache %s: %s\n", level_name(level), message.c_str());
    return;
  }
  // Undone however the callback returns (a C++ caller's callback may throw).
  struct Leave {
    const Logger& logger;
    ~Leave() {
      t_inside.pop_back();
      {
        std::lock_guard<std::mutex> lock(logger.mutex_);
        --logger.in_callback_;
      }
      logger.idle_.notify_all();
    }
  };
  t_inside.push_back(this);
  const Leave leave{*this};
  fn(user_data, level, message.c_str());
}

}  // namespace kvc
