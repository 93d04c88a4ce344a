#include <cuda_runtime_api.h>

#include <algorithm>
#include <limits>
#include <memory>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include "../common.hpp"
#include "../machine.hpp"
#include "../report.hpp"
#include "../timer.hpp"
#include "cuda_bench.hpp"
#include "device_timing.hpp"
#include "kvcache/kvcache_format.h"
#include "read_baseline.hpp"

namespace kvc_bench::cuda {
namespace {

constexpr double kInfinity = std::numeric_limits<double>::infinity();

// Device memory for the benchmark's tensors.
class DeviceBuffer {
 public:
  explicit DeviceBuffer(size_t bytes) { check_cuda(cudaMalloc(&data_, bytes), "cudaMalloc"); }
  ~DeviceBuffer() { cudaFree(data_); }
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;
  void* data() const { return data_; }

 private:
  void* data_ = nullptr;
};

class Stream {
 public:
  Stream() { check_cuda(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking), "cudaStreamCreate"); }
  ~Stream() { cudaStreamDestroy(stream_); }
  Stream(const Stream&) = delete;
  Stream& operator=(const Stream&) = delete;
  cudaStream_t get() const { return stream_; }
  void sync() const { check_cuda(cudaStreamSynchronize(stream_), "cudaStreamSynchronize"); }

 private:
  cudaStream_t stream_ = nullptr;
};

// `n` random values in [-1, 1] as `dtype`, copied to a new device buffer.
std::unique_ptr<DeviceBuffer> random_device(size_t n, kvc_dtype dtype, uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> u(-1.0f, 1.0f);
  std::vector<float> values(n);
  for (float& x : values) x = u(rng);
  std::vector<unsigned char> bytes(kvc_format_row_bytes(dtype, n));
  convert_from_f32(values.data(), bytes.data(), n, dtype);
  auto buffer = std::make_unique<DeviceBuffer>(bytes.size());
  check_cuda(cudaMemcpy(buffer->data(), bytes.data(), bytes.size(), cudaMemcpyHostToDevice),
             "cudaMemcpy");
  return buffer;
}

struct Batch {
  std::vector<int32_t> seq_ids, n_tokens, positions;
  kvc_batch batch;
  Batch(int32_t n_seqs, int32_t tokens_each, int32_t first_position, cudaStream_t stream)
      : seq_ids(size_t(n_seqs)), n_tokens(size_t(n_seqs), tokens_each) {
    std::iota(seq_ids.begin(), seq_ids.end(), 0);
    for (int32_t s = 0; s < n_seqs; ++s)
      for (int32_t t = 0; t < tokens_each; ++t) positions.push_back(first_position + t);
    kvc_batch_init(&batch, n_seqs, seq_ids.data(), n_tokens.data(), positions.data());
    batch.stream = stream;
  }
};

}  // namespace

double copy_bytes_per_s(size_t bytes, int reps) {
  DeviceBuffer from(bytes), to(bytes);
  check_cuda(cudaMemset(from.data(), 1, bytes), "cudaMemset");
  const double seconds = best_device_seconds(reps, [&] {
    check_cuda(cudaMemcpyAsync(to.data(), from.data(), bytes, cudaMemcpyDeviceToDevice),
               "cudaMemcpy");
  });
  return 2.0 * double(bytes) / seconds;
}

int run_attention(const CacheShape& shape, int32_t batch, int32_t chunk, int reps,
                  int prefill_reps) {
  report_machine();
  cudaDeviceProp prop{};
  check_cuda(cudaGetDeviceProperties(&prop, 0), "cudaGetDeviceProperties");
  report("device", prop.name);
  const double copy_bps = copy_bytes_per_s(size_t{1} << 30, 5);
  report("device_copy_gbps", copy_bps / 1e9);

  kvc_context* context = nullptr;
  check(kvc_context_create(nullptr, &context), "kvc_context_create");
  kvc_cache_params p = shape.params();
  p.backend = "cuda";
  const uint64_t kv_bytes = shape.kv_bytes() * uint64_t(batch);
  const uint64_t pos_bytes = uint64_t(shape.tokens) * shape.layers * shape.kv_heads * 4 * batch;
  p.memory_limit = size_t(kv_bytes + pos_bytes + (pos_bytes >> 2) + (uint64_t{256} << 20));
  kvc_cache* cache = nullptr;
  check(kvc_cache_create(context, &p, &cache), "kvc_cache_create");
  const Stream stream;

  // Fill: chunks of `chunk` tokens for every sequence at once, from one random device chunk.
  const size_t kv_width = size_t(shape.kv_heads) * size_t(shape.head_dim);
  const size_t chunk_rows = size_t(batch) * size_t(chunk);
  const kvc_dtype k_input = input_dtype_for(shape.formats.k);
  const kvc_dtype v_input = input_dtype_for(shape.formats.v);
  const auto k = random_device(chunk_rows * kv_width, k_input, uint32_t(shape.seed));
  const auto v = random_device(chunk_rows * kv_width, v_input, uint32_t(shape.seed) + 1);
  const kvc_tensor tk{k->data(), k_input, KVC_DEVICE_BACKEND, 0};
  const kvc_tensor tv{v->data(), v_input, KVC_DEVICE_BACKEND, 0};
  for (int32_t s = 0; s < batch; ++s) check(kvc_seq_create(cache, s), "kvc_seq_create");
  double append_s = kInfinity;
  for (int32_t start = 0; start < shape.tokens; start += chunk) {
    const int32_t n = std::min(chunk, shape.tokens - start);
    Batch b(batch, n, start, stream.get());
    Timer t;
    for (int32_t layer = 0; layer < shape.layers; ++layer)
      check(kvc_append(cache, layer, &b.batch, &tk, &tv), "kvc_append");
    stream.sync();
    if (n == chunk) append_s = std::min(append_s, t.seconds());
  }

  // Decode: one query per sequence at the next position, on every layer.
  const size_t q_width = size_t(shape.q_heads) * size_t(shape.head_dim);
  const auto q = random_device(size_t(std::max(batch, chunk)) * q_width, KVC_DTYPE_F32,
                               uint32_t(shape.seed) + 2);
  DeviceBuffer out(size_t(std::max(batch, chunk)) * q_width * sizeof(float));
  const kvc_tensor tq{q->data(), KVC_DTYPE_F32, KVC_DEVICE_BACKEND, 0};
  kvc_tensor_mut tout{out.data(), KVC_DTYPE_F32, KVC_DEVICE_BACKEND, 0};
  Batch decode(batch, 1, shape.tokens, stream.get());
  // The host's share: the time to enqueue a step's calls, before waiting for the device.
  double decode_s = kInfinity, decode_enqueue_s = kInfinity;
  for (int rep = 0; rep < reps + 1; ++rep) {  // rep 0 warms up
    Timer t;
    for (int32_t layer = 0; layer < shape.layers; ++layer)
      check(kvc_attend(cache, layer, &decode.batch, &tq, nullptr, &tout), "kvc_attend");
    const double enqueued = t.seconds();
    stream.sync();
    if (rep > 0) {
      decode_s = std::min(decode_s, t.seconds());
      decode_enqueue_s = std::min(decode_enqueue_s, enqueued);
    }
  }

  // Prefill: the last `chunk` stored tokens of sequence 0 as queries, causal.
  Batch prefill(1, chunk, shape.tokens - chunk, stream.get());
  double prefill_s = kInfinity;
  for (int rep = 0; rep < prefill_reps + 1; ++rep) {
    Timer t;
    for (int32_t layer = 0; layer < shape.layers; ++layer)
      check(kvc_attend(cache, layer, &prefill.batch, &tq, nullptr, &tout), "kvc_attend");
    stream.sync();
    if (rep > 0) prefill_s = std::min(prefill_s, t.seconds());
  }
  double prefill_keys = 0;
  for (int32_t i = 0; i < chunk; ++i) prefill_keys += shape.tokens - chunk + i + 1;
  const double prefill_flops = 4.0 * shape.head_dim * prefill_keys * shape.q_heads * shape.layers;

  kvc_cache_destroy(cache);
  kvc_context_destroy(context);
  // As many bytes as the decode reads, read once by a kernel that does nothing else.
  const double read_bps = read_bytes_per_s(size_t(kv_bytes), 10);

  CacheShape appended = shape;
  appended.tokens = chunk;
  const double decode_bps = double(kv_bytes) / decode_s;
  const double append_bps = double(appended.kv_bytes()) * batch / append_s;
  shape.report();
  report("chunk", chunk);
  report("batch", batch);
  report("kv_bytes", kv_bytes);
  report("decode_attention_seconds", decode_s);
  report("decode_attention_kv_gbps", decode_bps / 1e9);
  report("decode_enqueue_seconds", decode_enqueue_s);
  report("device_read_gbps", read_bps / 1e9);
  report("attention_bw_fraction", decode_bps / read_bps);
  report("attention_fraction_of_copy_bw", decode_bps / copy_bps);
  report("prefill_attention_seconds", prefill_s);
  report("prefill_attention_gflops", prefill_flops / prefill_s / 1e9);
  report("append_seconds", append_s);
  report("append_gbps", append_bps / 1e9);
  report("append_fraction_of_copy_bw", append_bps / copy_bps);
  return 0;
}

}  // namespace kvc_bench::cuda
