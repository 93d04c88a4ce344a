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

/// One read pass at a time over its own buffer, for a figure that pairs each of its passes with
/// a read pass taken right beside it (a shared VM's bandwidth moves within a run).
class ReadPass {
 public:
  ReadPass(size_t buffer_bytes, int threads);
  ~ReadPass();
  /// Streams the whole buffer once on the threads; returns the bytes read per second.
  double bytes_per_s();

 private:
  struct Buffer;
  std::unique_ptr<Buffer> buffer_;
  int threads_;
  std::vector<uint64_t> sums_;  // one cache line a thread
};

/// Reports memcpy_gbps and read_gbps (10^9 bytes/s), plus bandwidth_threads.
void report_bandwidth(const Bandwidth& bw);

}  // namespace kvc_bench
