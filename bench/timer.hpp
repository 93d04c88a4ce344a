// Wall-clock timing for kvc-bench (steady_clock).
#pragma once

#include <algorithm>
#include <chrono>
#include <cstddef>
#include <vector>

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

/// The median of timings (the mean of the middle two for an even count); 0 for none.
inline double median(std::vector<double> values) {
  if (values.empty()) return 0;
  const auto mid = values.begin() + static_cast<std::ptrdiff_t>(values.size() / 2);
  std::nth_element(values.begin(), mid, values.end());
  if (values.size() % 2 == 1) return *mid;
  return (*mid + *std::max_element(values.begin(), mid)) / 2;
}

/// Keeps the compiler from proving a pointer's memory unused: the pointed-to bytes are
/// treated as read and written here, so stores into it and copies out of it must happen.
inline void clobber_memory(const void* p) { asm volatile("" : : "r"(p) : "memory"); }

}  // namespace kvc_bench
