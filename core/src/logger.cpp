#include "logger.hpp"

#include <cstdio>

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

}  // namespace

void Logger::set_sink(kvc_log_fn fn, void* user_data, kvc_log_level min_level) {
  std::lock_guard<std::mutex> lock(mutex_);
  fn_ = fn;
  user_data_ = fn ? user_data : nullptr;
  min_level_ = fn ? min_level : KVC_LOG_WARN;
}

void Logger::log(kvc_log_level level, const std::string& message) const {
  std::lock_guard<std::mutex> lock(mutex_);
  if (level < min_level_ || level >= KVC_LOG_OFF) return;
  if (fn_) {
    fn_(user_data_, level, message.c_str());
  } else {
    std::fprintf(stderr, "kvcache %s: %s\n", level_name(level), message.c_str());
  }
}

}  // namespace kvc
