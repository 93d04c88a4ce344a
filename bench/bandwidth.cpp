#include "bandwidth.hpp"

#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <thread>
#include <vector>

#include "common.hpp"
#include "report.hpp"
#include "sum_words.hpp"
#include "timer.hpp"

namespace kvc_bench {
namespace {

struct FreeDeleter {
  void operator()(void* p) const { std::free(p); }
};
using Memory = std::unique_ptr<unsigned char, FreeDeleter>;

Memory allocate(size_t bytes) {
  void* p = std::aligned_alloc(64, (bytes + 63) / 64 * 64);
  if (p == nullptr) throw Error("bandwidth: cannot allocate " + std::to_string(bytes) + " bytes");
  std::memset(p, 1, bytes);  // touch every page so faults stay out of the timing
  return Memory(static_cast<unsigned char*>(p));
}

// Runs fn(thread_index, begin, end) over @p threads equal slices of [0, bytes) and returns the
// seconds the slowest took, measured from one common start.
template <typename Fn>
double run_split(size_t bytes, int threads, Fn fn) {
  const size_t slice = (bytes / static_cast<size_t>(threads)) / 64 * 64;
  if (threads == 1) {
    Timer t;
    fn(0, size_t{0}, bytes);
    return t.seconds();
  }
  std::vector<std::thread> pool;
  pool.reserve(static_cast<size_t>(threads));
  Timer t;
  for (int i = 0; i < threads; ++i) {
    const size_t begin = static_cast<size_t>(i) * slice;
    const size_t end = i + 1 == threads ? bytes : begin + slice;
    pool.emplace_back([=] { fn(i, begin, end); });
  }
  for (auto& th : pool) th.join();
  return t.seconds();
}

size_t usable_bytes(size_t buffer_bytes, int threads) {
  return std::max<size_t>(buffer_bytes / 64 * 64, 64 * static_cast<size_t>(std::max(threads, 1)));
}

}  // namespace

struct BaselinePasses::Buffers {
  explicit Buffers(size_t n) : bytes(n), src(allocate(n)), dst(allocate(n)) {}
  size_t bytes;
  Memory src;
  Memory dst;
};

BaselinePasses::BaselinePasses(size_t buffer_bytes, int threads)
    : buffers_(std::make_unique<Buffers>(usable_bytes(buffer_bytes, threads))),
      threads_(std::max(threads, 1)),
      sums_(static_cast<size_t>(threads_) * 8, 0) {}

BaselinePasses::~BaselinePasses() {
  uint64_t total = 0;
  for (uint64_t v : sums_) total += v;
  clobber_memory(&total);
}

size_t BaselinePasses::buffer_bytes() const { return buffers_->bytes; }

double BaselinePasses::read_bytes_per_s() {
  const unsigned char* s = buffers_->src.get();
  const double seconds = run_split(buffers_->bytes, threads_, [&](int i, size_t b, size_t e) {
    sums_[static_cast<size_t>(i) * 8] += sum_words(s + b, e - b);
  });
  return static_cast<double>(buffers_->bytes) / seconds;
}

double BaselinePasses::copy_bytes_per_s() {
  const unsigned char* s = buffers_->src.get();
  unsigned char* d = buffers_->dst.get();
  const double seconds = run_split(buffers_->bytes, threads_, [&](int, size_t b, size_t e) {
    std::memcpy(d + b, s + b, e - b);
    clobber_memory(d + b);
  });
  return static_cast<double>(buffers_->bytes) / seconds;
}

Bandwidth measure_bandwidth(size_t buffer_bytes, int threads, int reps) {
  BaselinePasses passes(buffer_bytes, threads);
  double best_copy = 0;
  double best_read = 0;
  for (int r = 0; r < std::max(reps, 1); ++r) {
    best_copy = std::max(best_copy, passes.copy_bytes_per_s());
    best_read = std::max(best_read, passes.read_bytes_per_s());
  }
  Bandwidth bw;
  bw.memcpy_bytes_per_s = best_copy;
  bw.read_bytes_per_s = best_read;
  bw.buffer_bytes = passes.buffer_bytes();
  bw.threads = std::max(threads, 1);
  return bw;
}

void report_bandwidth(const Bandwidth& bw) {
  report("bandwidth_threads", bw.threads);
  report("memcpy_gbps", bw.memcpy_bytes_per_s / 1e9);
  report("read_gbps", bw.read_bytes_per_s / 1e9);
}

}  // namespace kvc_bench
