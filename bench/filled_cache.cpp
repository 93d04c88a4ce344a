#include "filled_cache.hpp"

#include <random>
#include <string>

#include "common.hpp"
#include "report.hpp"

namespace kvc_bench {

CacheShape CacheShape::read(Options& opts) {
  CacheShape s;
  s.tokens = static_cast<int32_t>(opts.get_int("tokens", s.tokens, 1, 1 << 20));
  s.layers = static_cast<int32_t>(opts.get_int("layers", s.layers, 1, 1024));
  s.kv_heads = static_cast<int32_t>(opts.get_int("kv_heads", s.kv_heads, 1, 1024));
  s.q_heads = static_cast<int32_t>(opts.get_int("q_heads", s.q_heads, 1, 4096));
  s.head_dim = static_cast<int32_t>(opts.get_int("head_dim", s.head_dim, 1, 1024));
  s.formats = read_kv_formats(opts);
  const std::string rotation = opts.get_string("k_rotation", "none");
  if (rotation != "none" && rotation != "hadamard")
    throw UsageError("--k_rotation: expected none or hadamard, got '" + rotation + "'");
  s.k_rotation = rotation == "hadamard" ? KVC_ROTATION_HADAMARD : KVC_ROTATION_NONE;
  s.seed = static_cast<uint64_t>(opts.get_int("seed", 1, 0, INT64_MAX));
  s.backend = opts.get_string("backend", "");
  s.block_tokens = static_cast<int32_t>(opts.get_int("block_tokens", s.block_tokens, 1, 65536));
  if (s.q_heads % s.kv_heads != 0) throw UsageError("--q_heads must be a multiple of --kv_heads");
  check_head_dim(s.formats, s.head_dim);
  return s;
}

uint64_t CacheShape::kv_bytes() const {
  return static_cast<uint64_t>(tokens) * static_cast<uint64_t>(layers) *
         static_cast<uint64_t>(kv_heads) * formats.kv_row_bytes(head_dim);
}

kvc_cache_params CacheShape::params() const {
  kvc_cache_params p;
  kvc_cache_params_init(&p);
  p.layers = layers;
  p.kv_heads = kv_heads;
  p.q_heads = q_heads;
  p.head_dim = head_dim;
  formats.apply(&p);
  p.k_rotation = k_rotation;
  p.memory_limit = size_t{64} << 20;
  p.backend = backend.empty() ? nullptr : backend.c_str();
  p.block_tokens = block_tokens;
  return p;
}

void CacheShape::report() const {
  kvc_bench::report("tokens", tokens);
  kvc_bench::report("layers", layers);
  kvc_bench::report("kv_heads", kv_heads);
  kvc_bench::report("q_heads", q_heads);
  kvc_bench::report("head_dim", head_dim);
  kvc_bench::report("dtype", formats.name());
  report_kv_formats("", formats);
  if (k_rotation != KVC_ROTATION_NONE) kvc_bench::report("k_rotation", "hadamard");
  kvc_bench::report("block_tokens", block_tokens);
  if (!backend.empty()) kvc_bench::report("backend", backend);
}

FilledCache::FilledCache(const CacheShape& shape, const char* policy, int32_t budget,
                         int32_t sequences, int threads)
    : shape_(shape), sequences_(sequences) {
  const std::string yaml = "threads: " + std::to_string(threads) + "\n";
  check(kvc_context_create(yaml.c_str(), &context_), "kvc_context_create");
  kvc_cache_params p = shape.params();
  p.memory_limit = static_cast<size_t>(kv_bytes() * 2 + (size_t{64} << 20));
  p.policy = policy;
  p.budget = budget;
  check(kvc_cache_create(context_, &p, &cache_), "kvc_cache_create");

  const int32_t chunk = 256;
  const size_t row = static_cast<size_t>(shape.kv_heads) * static_cast<size_t>(shape.head_dim);
  std::mt19937 rng(static_cast<uint32_t>(shape.seed));
  std::uniform_real_distribution<float> u(-1.0f, 1.0f);
  std::vector<float> k(static_cast<size_t>(chunk) * row), v(k.size());
  std::vector<int32_t> positions(static_cast<size_t>(chunk));
  for (int32_t seq = 0; seq < sequences; ++seq) {
    check(kvc_seq_create(cache_, seq), "kvc_seq_create");
    for (int32_t start = 0; start < shape.tokens; start += chunk) {
      int32_t n = std::min(chunk, shape.tokens - start);
      for (int32_t i = 0; i < n; ++i) positions[static_cast<size_t>(i)] = start + i;
      kvc_batch batch;
      kvc_batch_init(&batch, 1, &seq, &n, positions.data());
      for (int32_t layer = 0; layer < shape.layers; ++layer) {
        for (float& x : k) x = u(rng);
        for (float& x : v) x = u(rng);
        kvc_tensor tk{k.data(), KVC_DTYPE_F32, KVC_DEVICE_HOST, 0};
        kvc_tensor tv{v.data(), KVC_DTYPE_F32, KVC_DEVICE_HOST, 0};
        check(kvc_append(cache_, layer, &batch, &tk, &tv), "kvc_append");
      }
    }
    seq_ids_.push_back(seq);
    n_tokens_.push_back(1);
    positions_.push_back(shape.tokens);
  }
  q_.resize(static_cast<size_t>(sequences) * static_cast<size_t>(shape.q_heads) *
            static_cast<size_t>(shape.head_dim));
  for (float& x : q_) x = u(rng);
  out_.resize(q_.size());
}

FilledCache::~FilledCache() {
  kvc_cache_destroy(cache_);
  kvc_context_destroy(context_);
}

void FilledCache::attend_decode_step(const kvc_attention_params* params) {
  kvc_batch batch;
  kvc_batch_init(&batch, sequences_, seq_ids_.data(), n_tokens_.data(), positions_.data());
  kvc_tensor q{q_.data(), KVC_DTYPE_F32, KVC_DEVICE_HOST, 0};
  kvc_tensor_mut out{out_.data(), KVC_DTYPE_F32, KVC_DEVICE_HOST, 0};
  for (int32_t layer = 0; layer < shape_.layers; ++layer) {
    check(kvc_attend(cache_, layer, &batch, &q, params, &out), "kvc_attend");
  }
}

}  // namespace kvc_bench
