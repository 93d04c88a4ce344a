// kvc-bench growth: append --tokens tokens one at a time to one sequence, every layer per
// token, three ways in the same run:
//   contiguous  the library, layout contiguous (capacity grows by growth_factor, copying);
//   paged       the library, layout paged (fixed blocks, growth never copies);
//   realloc     the baseline rten PR #408 removed: every step allocates a buffer of n+1
//               tokens per (layer, KV head) for K and for V, copies the n old tokens,
//               writes the new one and frees the old buffer (malloc + memcpy + free).
// The whole run is repeated --reps times (the three ways interleaved) and the minimum time
// of each way counts. The last line is growth_speedup_vs_realloc, the smaller of the two
// library speedups; the target (DESIGN.md section 8) is >= 10.
#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "bandwidth.hpp"
#include "common.hpp"
#include "kvcache/kvcache_format.h"
#include "machine.hpp"
#include "report.hpp"
#include "subcommands.hpp"
#include "timer.hpp"

namespace kvc_bench {

const char* const kGrowthHelp =
    "  --tokens=N            tokens appended one at a time (default 4096)\n"
    "  --layers=N            layers (default 4)\n"
    "  --kv_heads=N          KV heads (default 8)\n"
    "  --q_heads=N           query heads, a multiple of kv_heads (default 8)\n"
    "  --head_dim=N          head dimension (default 128)\n"
    "  --dtype=D             storage dtype: f16, bf16 or f32 (default f16)\n"
    "  --input_dtype=D       dtype of the K/V given to kvc_append: f32 or the storage dtype\n"
    "                        (default: the storage dtype)\n"
    "  --growth_factor=X     contiguous: capacity multiplier when full (default 2)\n"
    "  --block_tokens=N      paged: tokens per block (default 16)\n"
    "  --memory_limit_mib=N  cache memory limit in MiB (default: 8x the stored K/V bytes,\n"
    "                        at least 1024)\n"
    "  --backend=NAME        backend plugin (default: the library's default, cpu)\n"
    "  --reps=N              repeats of the whole run; the minimum time counts (default 3)\n"
    "  --seed=N              seed of the random K/V data (default 1)\n";

namespace {

struct Config {
  int32_t tokens = 4096;
  int32_t layers = 4;
  int32_t kv_heads = 8;
  int32_t q_heads = 8;
  int32_t head_dim = 128;
  kvc_dtype dtype = KVC_DTYPE_F16;
  kvc_dtype input_dtype = KVC_DTYPE_F16;
  double growth_factor = 2.0;
  int32_t block_tokens = 16;
  size_t memory_limit = 0;
  std::string backend;
  int reps = 3;
  uint64_t seed = 1;

  size_t head_row_bytes() const {
    return kvc_format_row_bytes(dtype, static_cast<size_t>(head_dim));
  }
  /// Bytes of K plus V that the run stores.
  uint64_t stored_bytes() const {
    return 2ull * static_cast<uint64_t>(tokens) * static_cast<uint64_t>(layers) *
           static_cast<uint64_t>(kv_heads) * head_row_bytes();
  }
};

// K and V of every (token, layer), `[kv_heads, head_dim]` each, in the input dtype.
class Inputs {
 public:
  explicit Inputs(const Config& cfg)
      : row_elems_(static_cast<size_t>(cfg.kv_heads) * static_cast<size_t>(cfg.head_dim)),
        row_bytes_(kvc_format_row_bytes(cfg.input_dtype, row_elems_)),
        layers_(static_cast<size_t>(cfg.layers)) {
    const size_t rows = static_cast<size_t>(cfg.tokens) * layers_;
    k_.resize(rows * row_bytes_);
    v_.resize(rows * row_bytes_);
    uint64_t state = cfg.seed;
    std::vector<float> tmp(row_elems_);
    for (std::vector<unsigned char>* dst : {&k_, &v_}) {
      for (size_t r = 0; r < rows; ++r) {
        for (float& x : tmp) x = uniform(state);
        convert_from_f32(tmp.data(), dst->data() + r * row_bytes_, row_elems_, cfg.input_dtype);
      }
    }
  }

  const unsigned char* k(int32_t token, int32_t layer) const { return at(k_, token, layer); }
  const unsigned char* v(int32_t token, int32_t layer) const { return at(v_, token, layer); }

 private:
  const unsigned char* at(const std::vector<unsigned char>& buf, int32_t token,
                          int32_t layer) const {
    return buf.data() +
           (static_cast<size_t>(token) * layers_ + static_cast<size_t>(layer)) * row_bytes_;
  }
  // splitmix64, mapped to [-1, 1).
  static float uniform(uint64_t& state) {
    uint64_t z = (state += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    z ^= z >> 31;
    return static_cast<float>(z >> 40) * (2.0f / 16777216.0f) - 1.0f;
  }

  size_t row_elems_;
  size_t row_bytes_;
  size_t layers_;
  std::vector<unsigned char> k_, v_;
};

struct WayResult {
  double seconds = 0;
  uint64_t bytes_copied = 0;
  uint64_t bytes_used = 0;  // library only
};

struct ContextDeleter {
  void operator()(kvc_context* c) const { kvc_context_destroy(c); }
};
struct CacheDeleter {
  void operator()(kvc_cache* c) const { kvc_cache_destroy(c); }
};
using ContextPtr = std::unique_ptr<kvc_context, ContextDeleter>;
using CachePtr = std::unique_ptr<kvc_cache, CacheDeleter>;

// ---------------------------------------------------------------- the library

WayResult run_library(kvc_context* ctx, const Config& cfg, kvc_layout layout, const Inputs& in) {
  kvc_cache_params params;
  kvc_cache_params_init(&params);
  params.layers = cfg.layers;
  params.kv_heads = cfg.kv_heads;
  params.q_heads = cfg.q_heads;
  params.head_dim = cfg.head_dim;
  params.dtype = cfg.dtype;
  params.layout = layout;
  params.block_tokens = cfg.block_tokens;
  params.growth_factor = cfg.growth_factor;
  params.memory_limit = cfg.memory_limit;
  params.backend = cfg.backend.empty() ? nullptr : cfg.backend.c_str();
  kvc_cache* raw = nullptr;
  check(kvc_cache_create(ctx, &params, &raw), "kvc_cache_create");
  CachePtr cache(raw);
  check(kvc_seq_create(cache.get(), 0), "kvc_seq_create");

  int32_t seq_id = 0;
  int32_t n_tokens = 1;
  int32_t position = 0;
  kvc_batch batch;
  kvc_batch_init(&batch, 1, &seq_id, &n_tokens, &position);
  kvc_tensor k{nullptr, cfg.input_dtype, KVC_DEVICE_HOST, 0};
  kvc_tensor v = k;

  Timer timer;
  for (int32_t t = 0; t < cfg.tokens; ++t) {
    position = t;
    for (int32_t l = 0; l < cfg.layers; ++l) {
      k.data = in.k(t, l);
      v.data = in.v(t, l);
      if (kvc_status* st = kvc_append(cache.get(), l, &batch, &k, &v)) {
        check(st, ("kvc_append (token " + std::to_string(t) + ", layer " + std::to_string(l) + ")")
                      .c_str());
      }
    }
  }
  WayResult result;
  result.seconds = timer.seconds();

  // Sanity: everything was stored.
  kvc_cache_stats stats{};
  stats.struct_size = sizeof stats;
  check(kvc_cache_get_stats(cache.get(), &stats), "kvc_cache_get_stats");
  const uint64_t expect_tokens = static_cast<uint64_t>(cfg.tokens) *
                                 static_cast<uint64_t>(cfg.layers) *
                                 static_cast<uint64_t>(cfg.kv_heads);
  if (stats.tokens_stored != expect_tokens) {
    throw Error("stats.tokens_stored is " + std::to_string(stats.tokens_stored) + ", expected " +
                std::to_string(expect_tokens));
  }
  for (int32_t l = 0; l < cfg.layers; ++l) {
    for (int32_t h = 0; h < cfg.kv_heads; ++h) {
      int32_t len = -1;
      check(kvc_seq_length(cache.get(), 0, l, h, &len), "kvc_seq_length");
      if (len != cfg.tokens) {
        throw Error("kvc_seq_length(layer " + std::to_string(l) + ", head " + std::to_string(h) +
                    ") is " + std::to_string(len) + ", expected " + std::to_string(cfg.tokens));
      }
    }
  }
  result.bytes_copied = stats.bytes_copied;
  result.bytes_used = stats.bytes_used;
  return result;
}

// ----------------------------------------------------- the re-allocating baseline

// Owns the per-(layer, head) K and V buffers of the baseline.
struct ReallocBuffers {
  explicit ReallocBuffers(size_t n) : k(n, nullptr), v(n, nullptr) {}
  ~ReallocBuffers() {
    for (unsigned char* p : k) std::free(p);
    for (unsigned char* p : v) std::free(p);
  }
  ReallocBuffers(const ReallocBuffers&) = delete;
  ReallocBuffers& operator=(const ReallocBuffers&) = delete;
  std::vector<unsigned char*> k, v;
};

// Writes one head's row of the new token in the storage dtype.
inline void write_row(unsigned char* dst, const unsigned char* src, const Config& cfg) {
  if (cfg.input_dtype == cfg.dtype) {
    std::memcpy(dst, src, cfg.head_row_bytes());
  } else {  // f32 input, 16-bit storage
    convert_from_f32(reinterpret_cast<const float*>(src), dst, static_cast<size_t>(cfg.head_dim),
                     cfg.dtype);
  }
}

// Replaces *buf (n tokens) by a new buffer of n + 1 tokens: malloc, copy, write, free.
// Returns the bytes of old contents copied.
inline size_t grow_by_one(unsigned char*& buf, size_t n, const unsigned char* src,
                          const Config& cfg) {
  const size_t row = cfg.head_row_bytes();
  auto* fresh = static_cast<unsigned char*>(std::malloc((n + 1) * row));
  if (fresh == nullptr) throw Error("realloc baseline: out of memory");
  if (n != 0) std::memcpy(fresh, buf, n * row);
  write_row(fresh + n * row, src, cfg);
  clobber_memory(fresh);  // the copy and the write must really happen
  std::free(buf);
  buf = fresh;
  return n * row;
}

WayResult run_realloc(const Config& cfg, const Inputs& in) {
  const size_t heads = static_cast<size_t>(cfg.kv_heads);
  const size_t in_head_bytes =
      kvc_format_row_bytes(cfg.input_dtype, static_cast<size_t>(cfg.head_dim));
  ReallocBuffers bufs(static_cast<size_t>(cfg.layers) * heads);
  uint64_t copied = 0;

  Timer timer;
  for (int32_t t = 0; t < cfg.tokens; ++t) {
    const size_t n = static_cast<size_t>(t);
    for (int32_t l = 0; l < cfg.layers; ++l) {
      const unsigned char* k = in.k(t, l);
      const unsigned char* v = in.v(t, l);
      unsigned char** kb = bufs.k.data() + static_cast<size_t>(l) * heads;
      unsigned char** vb = bufs.v.data() + static_cast<size_t>(l) * heads;
      for (size_t h = 0; h < heads; ++h) {
        copied += grow_by_one(kb[h], n, k + h * in_head_bytes, cfg);
        copied += grow_by_one(vb[h], n, v + h * in_head_bytes, cfg);
      }
    }
  }
  WayResult result;
  result.seconds = timer.seconds();
  result.bytes_copied = copied;

  // Sanity (and a use of every byte): the final buffers hold every token in order.
  const size_t row = cfg.head_row_bytes();
  std::vector<unsigned char> expect(row);
  for (int32_t t = 0; t < cfg.tokens; ++t) {
    for (int32_t l = 0; l < cfg.layers; ++l) {
      for (size_t h = 0; h < heads; ++h) {
        const size_t i = static_cast<size_t>(l) * heads + h;
        const size_t off = static_cast<size_t>(t) * row;
        write_row(expect.data(), in.k(t, l) + h * in_head_bytes, cfg);
        bool ok = std::memcmp(bufs.k[i] + off, expect.data(), row) == 0;
        write_row(expect.data(), in.v(t, l) + h * in_head_bytes, cfg);
        ok = ok && std::memcmp(bufs.v[i] + off, expect.data(), row) == 0;
        if (!ok) throw Error("realloc baseline: stored data differs from the input");
      }
    }
  }
  return result;
}

// ------------------------------------------------------------------- options

Config read_config(Options& opts) {
  Config cfg;
  cfg.tokens = static_cast<int32_t>(opts.get_int("tokens", 4096, 1, 1 << 20));
  cfg.layers = static_cast<int32_t>(opts.get_int("layers", 4, 1, 1024));
  cfg.kv_heads = static_cast<int32_t>(opts.get_int("kv_heads", 8, 1, 1024));
  cfg.q_heads = static_cast<int32_t>(opts.get_int("q_heads", cfg.kv_heads, 1, 8192));
  cfg.head_dim = static_cast<int32_t>(opts.get_int("head_dim", 128, 1, 1 << 16));
  cfg.dtype = parse_dtype(opts.get_string("dtype", "f16"), "dtype");
  if (kvc_format_has_scales(cfg.dtype)) {
    throw UsageError("--dtype: the realloc baseline stores f32, f16 or bf16 rows, not " +
                     std::string(kvc_dtype_name(cfg.dtype)));
  }
  cfg.input_dtype =
      parse_dtype(opts.get_string("input_dtype", kvc_dtype_name(cfg.dtype)), "input_dtype");
  cfg.growth_factor = opts.get_double("growth_factor", 2.0, 1.0 + 1e-9, 1e6);
  cfg.block_tokens = static_cast<int32_t>(opts.get_int("block_tokens", 16, 1, 1 << 20));
  const int64_t limit_mib = opts.get_int("memory_limit_mib", 0, 1, int64_t{1} << 30);
  cfg.backend = opts.get_string("backend", "");
  cfg.reps = static_cast<int>(opts.get_int("reps", 3, 1, 1000));
  cfg.seed = static_cast<uint64_t>(opts.get_int("seed", 1, 0, INT64_MAX));
  opts.reject_unknown();

  if (cfg.q_heads % cfg.kv_heads != 0) {
    throw UsageError("--q_heads must be a multiple of --kv_heads");
  }
  if (cfg.input_dtype != cfg.dtype && cfg.input_dtype != KVC_DTYPE_F32) {
    throw UsageError("--input_dtype must be f32 or the storage dtype");
  }
  if (opts.has("memory_limit_mib")) {
    cfg.memory_limit = static_cast<size_t>(limit_mib) << 20;
  } else {
    // Contiguous growth holds the old and the new segment at once and may overshoot the
    // final length by up to growth_factor; leave room for per-token metadata as well.
    cfg.memory_limit = std::max<size_t>(size_t{1} << 30, 8 * cfg.stored_bytes());
  }
  return cfg;
}

void report_way(const char* way, const WayResult& r, const Config& cfg, const Bandwidth& bw,
                bool library) {
  const std::string w = way;
  const double stored = static_cast<double>(cfg.stored_bytes());
  report(w + "_seconds", r.seconds);
  report(w + "_ns_per_token_append", r.seconds * 1e9 / cfg.tokens);
  report(w + "_bytes_copied_per_stored_byte", static_cast<double>(r.bytes_copied) / stored);
  if (library)
    report(w + "_bytes_used_per_stored_byte", static_cast<double>(r.bytes_used) / stored);
  report(w + "_append_fraction_of_memcpy", stored / r.seconds / bw.memcpy_bytes_per_s);
}

}  // namespace

int run_growth(Options& opts) {
  const Config cfg = read_config(opts);
  report_machine();

  const Bandwidth bw = measure_bandwidth();
  const Inputs inputs(cfg);
  kvc_context* raw_ctx = nullptr;
  check(kvc_context_create(nullptr, &raw_ctx), "kvc_context_create");
  ContextPtr ctx(raw_ctx);

  WayResult best[3];
  for (WayResult& b : best) b.seconds = 1e300;
  auto keep = [](WayResult& b, const WayResult& r) {
    b.seconds = std::min(b.seconds, r.seconds);
    b.bytes_copied = std::max(b.bytes_copied, r.bytes_copied);
    b.bytes_used = std::max(b.bytes_used, r.bytes_used);
  };
  for (int rep = 0; rep < cfg.reps; ++rep) {
    keep(best[0], run_library(ctx.get(), cfg, KVC_LAYOUT_CONTIGUOUS, inputs));
    keep(best[1], run_library(ctx.get(), cfg, KVC_LAYOUT_PAGED, inputs));
    keep(best[2], run_realloc(cfg, inputs));
  }

  report("tokens", cfg.tokens);
  report("layers", cfg.layers);
  report("kv_heads", cfg.kv_heads);
  report("q_heads", cfg.q_heads);
  report("head_dim", cfg.head_dim);
  report("dtype", kvc_dtype_name(cfg.dtype));
  report("input_dtype", kvc_dtype_name(cfg.input_dtype));
  report("growth_factor", cfg.growth_factor);
  report("block_tokens", cfg.block_tokens);
  report("reps", cfg.reps);
  report("stored_bytes", cfg.stored_bytes());
  report_bandwidth(bw);
  report_way("contiguous", best[0], cfg, bw, true);
  report_way("paged", best[1], cfg, bw, true);
  report_way("realloc", best[2], cfg, bw, false);
  const double contiguous_speedup = best[2].seconds / best[0].seconds;
  const double paged_speedup = best[2].seconds / best[1].seconds;
  report("contiguous_speedup_vs_realloc", contiguous_speedup);
  report("paged_speedup_vs_realloc", paged_speedup);
  report("growth_speedup_vs_realloc", std::min(contiguous_speedup, paged_speedup));
  return 0;
}

}  // namespace kvc_bench
