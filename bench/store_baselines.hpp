// The baselines kvc-bench store compares the stores with, each measured in the same run on a
// value of the same size: memcpy (host store), writing and reading a file in the disk store's
// folder (disk store), and redis-benchmark against the same server (redis store).
#pragma once

#include <cstddef>
#include <string>

namespace kvc_bench {

/// Median seconds of one memcpy of @p bytes between two buffers already touched, over @p reps.
double memcpy_seconds(size_t bytes, int reps);

struct FileSeconds {
  double write = 0;  // open, write, fsync (when asked), close
  double read = 0;   // open, read, close (from the page cache, as the store's reads are)
};
/// Medians over @p reps of writing @p bytes to a file in @p folder (removed afterwards) and of
/// reading it back.
FileSeconds file_seconds(const std::string& folder, size_t bytes, bool fsync, int reps);

struct RedisBenchmarkRates {
  double set_per_s = 0;  // redis-benchmark's requests per second for SET of values of `bytes`
  double get_per_s = 0;  // and for GET
};
/// Runs `redis-benchmark -h host -p port -c 1 -n requests -d bytes -t set,get --csv` and reads
/// its two rates; throws Error when it cannot be run or prints no rate.
RedisBenchmarkRates redis_benchmark(const std::string& host, int port, size_t bytes,
                                    int requests);

}  // namespace kvc_bench
