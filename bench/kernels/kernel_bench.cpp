// kvc-kernel-bench: the CPU backend's decode attention (attend_block, the kernels the backend
// picks) over paged blocks laid out as the block pool lays them, timed in each thread's CPU
// time, so that a neighbour's steal on a shared VM counts less than in kvc-bench attention's
// wall-clock figures. Rates of K/V bytes, from the same blocks in the same run:
//   cold_kv_gbps        decode over --cold_mib of K/V, every block read from memory once;
//   arithmetic_kv_gbps  the same decode over one job per thread whose blocks stay in L2;
//   blocks_read_gbps    the cold blocks summed without arithmetic, in the kernel's order;
//   stream_read_gbps    as many bytes in one allocation summed the same way, on the same
//                       threads, beside the block read in each round: the median of the
//                       rounds' ratios (blocks_over_stream_read) is what reading paged blocks
//                       instead of one stream costs, paired against the host's swings.
// Cold decode can reach neither the arithmetic rate nor the block read; 1 / (1/arithmetic +
// 1/read) is what it gets when memory time and arithmetic do not overlap at all
// (serial_model_kv_gbps), min of the two when they overlap fully. overlap_fraction places the
// cold figure between them (0: serial, 1: full overlap).
#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <ctime>
#include <exception>
#include <limits>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "attention_block.hpp"
#include "common.hpp"
#include "kvcache/kvcache_format.h"
#include "machine.hpp"
#include "options.hpp"
#include "report.hpp"
#include "sum_words.hpp"
#include "timer.hpp"

namespace {

using namespace kvc_bench;
using kvc::cpu::AttentionShape;
using kvc::cpu::AttentionWorkspace;

const char* const kHelp =
    "usage: kvc-kernel-bench [--key=value ...] [--json]\n"
    "  --threads=N       threads, each timed in its own CPU time (default: all cores)\n"
    "  --cold_mib=N      K/V of the cold jobs, and as many bytes again for the stream read\n"
    "                    (default 1024)\n"
    "  --keys=N          keys of each cold job (default 4096)\n"
    "  --l2_keys=N       keys of each thread's L2-resident job (default 1024)\n"
    "  --block_tokens=N  tokens per paged block (default 16)\n"
    "  --group=N         query heads per KV head (default 4)\n"
    "  --head_dim=N      (default 128)\n"
    "  --dtype=D         f16, bf16 or f32 (default f16)\n"
    "  --rounds=N        rounds of cold, read and L2 passes; the best of each counts (default 5)\n"
    "--json prints the values as one JSON object instead of name=value lines.\n";

double thread_cpu_seconds() {
  timespec t{};
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t);
  return double(t.tv_sec) + 1e-9 * double(t.tv_nsec);
}

// Blocks of K rows, V rows and positions, one allocation each, as the pool takes them from
// the CPU backend; taken in runs of 16 per job with the jobs interleaved, as appends of
// 256-token chunks to a batch of sequences take them.
class PagedJobs {
 public:
  PagedJobs(size_t jobs, size_t keys, size_t block_tokens, size_t row_bytes, uint32_t seed)
      : blocks_per_job_(keys / block_tokens),
        block_tokens_(block_tokens),
        row_bytes_(row_bytes),
        blocks_(jobs * blocks_per_job_) {
    const size_t block_bytes = (block_tokens * (2 * row_bytes + sizeof(int32_t)) + 63) / 64 * 64;
    const size_t run = std::max<size_t>(1, 256 / block_tokens);
    for (size_t first = 0; first < blocks_per_job_; first += run)
      for (size_t j = 0; j < jobs; ++j)
        for (size_t b = first; b < std::min(blocks_per_job_, first + run); ++b) {
          void* block = std::aligned_alloc(64, block_bytes);
          if (block == nullptr) throw std::bad_alloc();
          blocks_[j * blocks_per_job_ + b] = static_cast<unsigned char*>(block);
        }
    std::mt19937 rng(seed);
    std::uniform_int_distribution<int> bits(0, 255);
    for (size_t i = 0; i < blocks_.size(); ++i) {
      unsigned char* block = blocks_[i];
      // Bytes that are finite f16, bf16 and f32 values of moderate size: the high byte of each
      // 16-bit element keeps its exponent small.
      for (size_t e = 0; e < 2 * block_tokens * row_bytes; ++e)
        block[e] = e % 2 == 1 ? static_cast<unsigned char>(0x30 | (bits(rng) & 0x8F))
                              : static_cast<unsigned char>(bits(rng));
      auto* pos = reinterpret_cast<int32_t*>(block + 2 * block_tokens * row_bytes);
      for (size_t t = 0; t < block_tokens; ++t)
        pos[t] = static_cast<int32_t>((i % blocks_per_job_) * block_tokens + t);
      segments_.push_back({sizeof(kvc_segment), static_cast<int32_t>(block_tokens), block,
                           block + block_tokens * row_bytes, pos, 0, KVC_DTYPE_F32,
                           KVC_DTYPE_F32});
    }
  }
  ~PagedJobs() {
    for (unsigned char* block : blocks_) std::free(block);
  }
  PagedJobs(const PagedJobs&) = delete;
  PagedJobs& operator=(const PagedJobs&) = delete;

  size_t jobs() const { return blocks_.size() / blocks_per_job_; }
  size_t keys() const { return blocks_per_job_ * block_tokens_; }
  uint64_t kv_bytes() const { return uint64_t(blocks_.size()) * kv_bytes_per_block(); }
  const kvc_segment* segments(size_t job) const { return segments_.data() + job * blocks_per_job_; }
  int32_t n_segments() const { return static_cast<int32_t>(blocks_per_job_); }

  // The sum of the K and V bytes of jobs [begin, end), block by block in the kernel's order.
  uint64_t read(size_t begin, size_t end) const {
    uint64_t sum = 0;
    for (size_t i = begin * blocks_per_job_; i < end * blocks_per_job_; ++i)
      sum += sum_words(blocks_[i], kv_bytes_per_block());
    return sum;
  }

 private:
  size_t kv_bytes_per_block() const { return 2 * block_tokens_ * row_bytes_; }

  size_t blocks_per_job_, block_tokens_, row_bytes_;
  std::vector<unsigned char*> blocks_;
  std::vector<kvc_segment> segments_;
};

struct Shape {
  size_t group, head_dim;
  kvc_dtype dtype;
};

// One decode query per job, attending over every key of its job.
class Decode {
 public:
  Decode(const PagedJobs& paged, const Shape& s)
      : q_(paged.jobs() * s.group * s.head_dim), out_(q_.size()) {
    std::mt19937 rng(7);
    std::uniform_real_distribution<float> u(-1.0f, 1.0f);
    for (float& x : q_) x = u(rng);
    position_ = static_cast<int32_t>(paged.keys());
    for (size_t j = 0; j < paged.jobs(); ++j) {
      kvc_attend_job job{};
      job.struct_size = sizeof job;
      job.n_queries = 1;
      job.q = q_.data() + j * s.group * s.head_dim;
      job.q_stride = s.group * s.head_dim;
      job.q_dtype = KVC_DTYPE_F32;
      job.q_pos = &position_;
      job.out = out_.data() + j * s.group * s.head_dim;
      job.out_stride = job.q_stride;
      job.segments = paged.segments(j);
      job.n_segments = paged.n_segments();
      jobs_.push_back(job);
    }
    // One query a job: the workspace needs room for one query's rows.
    shape_ = {s.head_dim, kvc::cpu::padded_dim(s.head_dim), s.group, 1, s.dtype, s.dtype,
              1.0f / float(s.head_dim), 0, 0.0f, 0, &kvc::cpu::tile_kernels(),
              kvc_format_has_scales(s.dtype) != 0, kvc_format_has_scales(s.dtype) == 0};
  }

  void run(size_t begin, size_t end) {
    AttentionWorkspace& w = kvc::cpu::thread_workspace(shape_);
    for (size_t j = begin; j < end; ++j) {
      kvc::cpu::attend_block(jobs_[j], 0, 1, {0, std::numeric_limits<size_t>::max()}, shape_, w);
      kvc::cpu::write_output(jobs_[j], shape_, w);
    }
  }
  const char* kernels() const { return shape_.kernels->name; }

 private:
  std::vector<float> q_, out_;
  int32_t position_ = 0;
  std::vector<kvc_attend_job> jobs_;
  AttentionShape shape_{};
};

// Runs body(thread, begin, end) on `threads` threads over `items` items split evenly, `reps`
// times each; returns the slowest thread's CPU seconds per rep.
template <class Body>
double cpu_seconds(int threads, size_t items, int reps, Body body) {
  std::vector<double> seconds(size_t(threads), 0.0);
  std::vector<std::thread> pool;
  for (int t = 0; t < threads; ++t) {
    pool.emplace_back([&, t] {
      const size_t begin = items * size_t(t) / size_t(threads);
      const size_t end = items * size_t(t + 1) / size_t(threads);
      const double start = thread_cpu_seconds();
      for (int r = 0; r < reps; ++r) body(size_t(t), begin, end);
      seconds[size_t(t)] = (thread_cpu_seconds() - start) / reps;
    });
  }
  for (std::thread& thread : pool) thread.join();
  return *std::max_element(seconds.begin(), seconds.end());
}

int run(Options& opts) {
  const int threads = static_cast<int>(opts.get_int(
      "threads", std::max(1u, std::thread::hardware_concurrency()), 1, 1024));
  const int64_t cold_mib = opts.get_int("cold_mib", 1024, 1, int64_t{1} << 20);
  const size_t block_tokens = size_t(opts.get_int("block_tokens", 16, 1, 4096));
  auto whole_blocks = [&](int64_t tokens) { return size_t(tokens) / block_tokens * block_tokens; };
  const size_t keys = whole_blocks(opts.get_int("keys", 4096, 1, 1 << 24));
  const size_t l2_keys = whole_blocks(opts.get_int("l2_keys", 1024, 1, 1 << 24));
  const Shape shape{size_t(opts.get_int("group", 4, 1, 64)),
                    size_t(opts.get_int("head_dim", 128, 1, 1024)),
                    parse_dtype(opts.get_string("dtype", "f16"), "dtype")};
  const int rounds = static_cast<int>(opts.get_int("rounds", 5, 1, 1000));
  opts.reject_unknown();
  if (keys == 0 || l2_keys == 0) throw UsageError("--keys and --l2_keys must hold a block");
  report_machine();

  const size_t row_bytes = kvc_format_row_bytes(shape.dtype, shape.head_dim);
  const size_t job_bytes = keys * 2 * row_bytes;
  const size_t cold_jobs = std::max<size_t>(size_t(threads), (size_t(cold_mib) << 20) / job_bytes);
  PagedJobs cold(cold_jobs, keys, block_tokens, row_bytes, 1);
  PagedJobs hot(size_t(threads), l2_keys, block_tokens, row_bytes, 2);
  Decode cold_decode(cold, shape), hot_decode(hot, shape);
  // Enough passes over the L2-resident jobs to take about as long as one over 256 MiB.
  const int hot_reps = int(std::max<uint64_t>(1, (uint64_t{256} << 20) / hot.kv_bytes()));

  std::vector<uint64_t> sums(static_cast<size_t>(threads), 0);
  auto attend_cold = [&](size_t, size_t b, size_t e) { cold_decode.run(b, e); };
  auto read_cold = [&](size_t t, size_t b, size_t e) { sums[t] += cold.read(b, e); };
  auto attend_hot = [&](size_t, size_t b, size_t e) { hot_decode.run(b, e); };
  // The blocks' bytes again as one stream, a job's share after another's.
  const size_t stream_job_bytes = size_t(cold.kv_bytes() / cold.jobs());
  std::vector<uint64_t> stream(cold.kv_bytes() / sizeof(uint64_t), 1);
  auto read_stream = [&](size_t t, size_t b, size_t e) {
    sums[t] += sum_words(reinterpret_cast<const unsigned char*>(stream.data()) +
                             b * stream_job_bytes,
                         (e - b) * stream_job_bytes);
  };
  double cold_s = 1e300, read_s = 1e300, stream_s = 1e300, hot_s = 1e300;
  std::vector<double> blocks_over_stream;
  cpu_seconds(threads, cold.jobs(), 1, attend_cold);  // touches every page once
  for (int round = 0; round < rounds; ++round) {
    cold_s = std::min(cold_s, cpu_seconds(threads, cold.jobs(), 1, attend_cold));
    // In turn first, so that neither always follows the other.
    const bool blocks_first = round % 2 == 0;
    double blocks_s = blocks_first ? cpu_seconds(threads, cold.jobs(), 1, read_cold) : 0;
    const double one_stream_s = cpu_seconds(threads, cold.jobs(), 1, read_stream);
    if (!blocks_first) blocks_s = cpu_seconds(threads, cold.jobs(), 1, read_cold);
    read_s = std::min(read_s, blocks_s);
    stream_s = std::min(stream_s, one_stream_s);
    blocks_over_stream.push_back(one_stream_s / blocks_s);
    clobber_memory(sums.data());
    hot_s = std::min(hot_s, cpu_seconds(threads, hot.jobs(), hot_reps, attend_hot));
  }
  const double cold_gbps = double(cold.kv_bytes()) / cold_s / 1e9;
  const double read_gbps = double(cold.kv_bytes()) / read_s / 1e9;
  const double stream_gbps = double(cold.kv_bytes()) / stream_s / 1e9;
  const double hot_gbps = double(hot.kv_bytes()) / hot_s / 1e9;
  const double serial = 1.0 / (1.0 / hot_gbps + 1.0 / read_gbps);
  const double overlapped = std::min(hot_gbps, read_gbps);
  report("kernels", cold_decode.kernels());
  report("threads", threads);
  report("block_tokens", block_tokens);
  report("group", shape.group);
  report("head_dim", shape.head_dim);
  report("dtype", dtype_name(shape.dtype));
  report("cold_kv_bytes", cold.kv_bytes());
  report("blocks_read_gbps", read_gbps);
  report("stream_read_gbps", stream_gbps);
  report("blocks_over_stream_read", median(blocks_over_stream));
  report("arithmetic_kv_gbps", hot_gbps);
  report("serial_model_kv_gbps", serial);
  report("cold_kv_gbps", cold_gbps);
  report("cold_fraction_of_blocks_read", cold_gbps / read_gbps);
  report("overlap_fraction",
         overlapped > serial ? (cold_gbps - serial) / (overlapped - serial) : 1.0);
  return 0;
}

}  // namespace

namespace kvc::plugin {
const char* plugin_label() { return "kvc-kernel-bench"; }
}  // namespace kvc::plugin

int main(int argc, char** argv) {
  try {
    Options opts(arguments_taking_json(1, argc, argv));
    if (opts.help()) {
      std::fputs(kHelp, stdout);
      return 0;
    }
    const int status = run(opts);
    finish_report();
    return status;
  } catch (const UsageError& e) {
    std::fprintf(stderr, "kvc-kernel-bench: %s\n%s", e.what(), kHelp);
    return 2;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "kvc-kernel-bench: %s\n", e.what());
    return 1;
  }
}
