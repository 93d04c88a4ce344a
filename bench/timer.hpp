// Wall-clock timing for kvc-bench (steady_clock).
#pragma once

#include <chrono>

namespace kvc_bench {

/// Starts on construction; seconds() reads the time elapsed since then (or since restart()).
class Timer {
 public:
  Timer() : start_(Clock::now()) {}
  void restart() { start_ = Clock::now(); }
  double seconds() const { return std::chrono::duration<double>(Clock::now() - start_).count(); }

 private:
  using Clock = std::chrono::steady_clock;
  Clock::time_point start_;
};

/// Keeps the compiler from proving a pointer's memory unused: the pointed-to bytes are
/// treated as read and written here, so stores into it and copies out of it must happen.
inline void clobber_memory(const void* p) { asm volatile("" : : "r"(p) : "memory"); }

}  // namespace kvc_bench
