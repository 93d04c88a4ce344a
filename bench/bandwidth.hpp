// Host memory bandwidth measured at the start of a benchmark, so that results can be
// reported as fractions of what this (shared, noisy) machine delivers right now.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <vector>

namespace kvc_bench {

struct Bandwidth {
  /// memcpy: bytes copied per second (each byte is read once and written once).
  double memcpy_bytes_per_s = 0;
  /// Read-only streaming: bytes summed per second.
  double read_bytes_per_s = 0;
  size_t buffer_bytes = 0;
  int threads = 1;
};

/// Measures memcpy and read bandwidth over buffers of @p buffer_bytes (pick one well past the
/// last-level cache), split across @p threads threads; the best of @p reps passes each.
Bandwidth measure_bandwidth(size_t buffer_bytes = size_t{256} << 20, int threads = 1, int reps = 5);

/// One pass at a time over buffers of its own, for a figure that pairs each of its passes with
/// a baseline pass taken right beside it (a shared VM's bandwidth moves within a run).
class BaselinePasses {
 public:
  BaselinePasses(size_t buffer_bytes, int threads);
  ~BaselinePasses();
  /// Streams the buffer once on the threads; returns the bytes read per second.
  double read_bytes_per_s();
  /// memcpy of the buffer into the other on the threads; returns the bytes copied per second.
  double copy_bytes_per_s();
  size_t buffer_bytes() const;

 private:
  struct Buffers;
  std::unique_ptr<Buffers> buffers_;
  int threads_;
  std::vector<uint64_t> sums_;  // one cache line a thread
};

/// Reports memcpy_gbps and read_gbps (10^9 bytes/s), plus bandwidth_threads.
void report_bandwidth(const Bandwidth& bw);

}  // namespace kvc_bench
