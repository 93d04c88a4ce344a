// Host memory bandwidth measured at the start of a benchmark, so that results can be
// reported as fractions of what this (shared, noisy) machine delivers right now.
#pragma once

#include <cstddef>

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

/// Reports memcpy_gbps and read_gbps (10^9 bytes/s), plus bandwidth_threads.
void report_bandwidth(const Bandwidth& bw);

}  // namespace kvc_bench
