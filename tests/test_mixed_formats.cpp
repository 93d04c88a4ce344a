// The cpu backend over heads whose segments hold rows of more than one format (plugin ABI 1.6:
// kvc_segment::own_formats, a demoted tier) and its convert, called directly
// (direct_cpu_backend.hpp) as the host calls them. Attention is checked against plain double
// loops over the rows as the format table decodes them, with each key scored by the query
// rounded as kvc_format_query_format says for that key's K format. CTest runs this file with
// each kernel set (tests/kernels/CMakeLists.txt).
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "direct_cpu_backend.hpp"
#include "kvcache/kvcache_format.h"
#include "kvcache/kvcache_plugin.h"
#include "kvcache/kvcache_rotation.h"
#include "reference_attention.hpp"
#include "test_support.hpp"

namespace {

constexpr int32_t kDim = 64;
constexpr int32_t kGroup = 4;  // query heads per KV head

struct Formats {
  kvc_dtype k;
  kvc_dtype v;
};

// Backend memory as the backend hands it out: 64-byte aligned.
struct Buffer {
  explicit Buffer(size_t bytes)
      : data(static_cast<unsigned char*>(std::aligned_alloc(64, (bytes + 64) / 64 * 64))) {}
  struct Free {
    void operator()(unsigned char* p) const { std::free(p); }
  };
  std::unique_ptr<unsigned char, Free> data;
  unsigned char* get() const { return data.get(); }
};

// Rows of `format` from random values, and the values the format table decodes them to.
struct Rows {
  Rows(kvc_dtype format, size_t n, ref::Rng& rng) : bytes(kvc_format_row_bytes(format, kDim) * n) {
    const std::vector<float> values = rng.vec(n * kDim);
    const size_t row_bytes = kvc_format_row_bytes(format, kDim);
    decoded.resize(values.size());
    for (size_t r = 0; r < n; ++r) {
      REQUIRE(kvc_format_row_from_f32(format, values.data() + r * kDim, bytes.get() + r * row_bytes,
                                      kDim));
      REQUIRE(kvc_format_row_to_f32(format, bytes.get() + r * row_bytes, decoded.data() + r * kDim,
                                    kDim));
    }
  }
  Buffer bytes;
  std::vector<float> decoded;
};

// One segment: positions, and K and V rows of its formats; `own` marks formats of its own.
struct Segment {
  Segment(Formats f, bool own_formats, std::vector<int32_t> positions, ref::Rng& rng)
      : formats(f), own(own_formats), pos(std::move(positions)), k(f.k, pos.size(), rng),
        v(f.v, pos.size(), rng) {}
  Formats formats;
  bool own;
  std::vector<int32_t> pos;
  Rows k, v;
  kvc_segment abi() const {
    kvc_segment s{};
    s.struct_size = sizeof(s);
    s.count = int32_t(pos.size());
    s.k = k.bytes.get();
    s.v = v.bytes.get();
    s.pos = pos.data();
    s.own_formats = own ? 1 : 0;
    s.k_dtype = own ? formats.k : KVC_DTYPE_F32;  // ignored without own_formats
    s.v_dtype = own ? formats.v : KVC_DTYPE_F32;
    return s;
  }
};

// A head of n_keys tokens at positions 0..n_keys-1: the middle half demoted to `tier`'s
// formats, stored first and in the middle of storage, in segments of 37 tokens; the rest in
// the call's formats, in blocks of 16 but a first short one of 5.
struct Head {
  Head(Formats call, Formats tier, int32_t n_keys, ref::Rng& rng) {
    const int32_t low = n_keys / 4, high = n_keys - n_keys / 4, middle = (low + high) / 2;
    auto add = [&](Formats f, bool own, int32_t first, int32_t end, int32_t block, int32_t lead) {
      for (int32_t p = first; p < end;) {
        const int32_t n = std::min(end - p, p == first ? lead : block);
        std::vector<int32_t> positions(static_cast<size_t>(n));
        for (int32_t i = 0; i < n; ++i) positions[size_t(i)] = p + i;
        segments.push_back(std::make_unique<Segment>(f, own, positions, rng));
        p += n;
      }
    };
    add(tier, true, low, middle, 37, 37);
    add(call, false, 0, low, 16, 5);
    add(tier, true, middle, high, 37, 37);
    add(call, false, high, n_keys, 16, 16);
    for (const auto& s : segments) abi.push_back(s->abi());
  }
  size_t tokens() const {
    size_t n = 0;
    for (const auto& s : segments) n += s->pos.size();
    return n;
  }
  std::vector<std::unique_ptr<Segment>> segments;
  std::vector<kvc_segment> abi;
};

struct Options {
  float scale = 1.0f;
  int32_t window = 0;
  float softcap = 0.0f;
  int32_t observation_window = 2;
};

struct Expected {
  std::vector<double> out;  // [query][group head][dim]
  std::vector<double> sum, last, window;
};

// A query row times the scale (in f32) as it scores keys of `k_format`: rounded to q8_0 for a
// format with scales (kvc_format_query_format), else as it is.
std::vector<double> query_for(const float* q, float scale, kvc_dtype k_format) {
  std::vector<float> scaled(kDim);
  for (int32_t i = 0; i < kDim; ++i) scaled[size_t(i)] = q[i] * scale;
  if (kvc_format_query_format(k_format) == KVC_DTYPE_Q8_0) {
    std::vector<unsigned char> row(kvc_format_row_bytes(KVC_DTYPE_Q8_0, kDim));
    kvc_format_row_from_f32(KVC_DTYPE_Q8_0, scaled.data(), row.data(), kDim);
    kvc_format_row_to_f32(KVC_DTYPE_Q8_0, row.data(), scaled.data(), kDim);
  }
  return {scaled.begin(), scaled.end()};
}

Expected reference(const Head& head, const std::vector<float>& q, const std::vector<int32_t>& q_pos,
                   const Options& o) {
  const size_t n_keys = head.tokens(), n_queries = q_pos.size();
  Expected e;
  e.out.assign(n_queries * kGroup * kDim, 0.0);
  e.sum.assign(n_keys, 0.0);
  e.last.assign(n_keys, 0.0);
  e.window.assign(n_keys, 0.0);
  for (size_t i = 0; i < n_queries; ++i) {
    for (int32_t h = 0; h < kGroup; ++h) {
      const float* qh = q.data() + (i * kGroup + size_t(h)) * kDim;
      std::vector<double> logits(n_keys, -INFINITY);
      double max_logit = -INFINITY;
      size_t key = 0;
      for (const auto& s : head.segments) {
        const std::vector<double> query = query_for(qh, o.scale, s->formats.k);
        for (size_t t = 0; t < s->pos.size(); ++t, ++key) {
          const int32_t p = s->pos[t];
          if (p > q_pos[i] || (o.window > 0 && p <= q_pos[i] - o.window)) continue;
          double dot = 0.0;
          for (int32_t d = 0; d < kDim; ++d) dot += query[size_t(d)] * s->k.decoded[t * kDim + size_t(d)];
          if (o.softcap > 0.0f) dot = o.softcap * std::tanh(dot / o.softcap);
          logits[key] = dot;
          max_logit = std::max(max_logit, dot);
        }
      }
      if (max_logit == -INFINITY) continue;
      std::vector<double> p(n_keys);
      double denominator = 0.0;
      for (size_t t = 0; t < n_keys; ++t) denominator += p[t] = std::exp(logits[t] - max_logit);
      double* out = e.out.data() + (i * kGroup + size_t(h)) * kDim;
      key = 0;
      for (const auto& s : head.segments) {
        for (size_t t = 0; t < s->pos.size(); ++t, ++key) {
          const double weight = p[key] / denominator;
          for (int32_t d = 0; d < kDim; ++d) out[d] += weight * s->v.decoded[t * kDim + size_t(d)];
          e.sum[key] += weight;
          if (i + 1 == n_queries) e.last[key] += weight / kGroup;
          if (i + size_t(o.observation_window) >= n_queries) e.window[key] += weight;
        }
      }
    }
  }
  return e;
}

// An instance of the cpu backend, destroyed with it.
struct Instance {
  explicit Instance(kvc_rotation k_rotation = KVC_ROTATION_NONE)
      : host(kvt::direct_host()), cpu(kvt::cpu_backend(host)) {
    kvc_backend_config config{};
    config.struct_size = sizeof(config);
    config.n_layers = config.n_kv_heads = 1;
    config.n_q_heads = kGroup;
    config.head_dim = kDim;
    config.k_dtype = config.v_dtype = KVC_DTYPE_F32;
    config.block_tokens = 16;
    config.device = -1;
    config.memory_limit = 1 << 20;
    config.k_rotation = k_rotation;
    kvc_plugin_error error{};
    REQUIRE_MESSAGE(cpu->create_with_config(&host, &config, &instance, &error) == KVC_OK,
                    error.message);
  }
  ~Instance() { cpu->destroy(instance); }
  kvc_host_api host;
  const kvc_backend_vtable* cpu;
  void* instance = nullptr;
};

void check_close(const std::vector<float>& got, const std::vector<double>& want, const char* what) {
  REQUIRE(got.size() == want.size());
  size_t bad = 0, first_bad = 0;
  for (size_t i = 0; i < got.size(); ++i) {
    if (std::abs(double(got[i]) - want[i]) > 1e-3 + 1e-3 * std::abs(want[i])) {
      if (bad++ == 0) first_bad = i;
    }
  }
  CHECK_MESSAGE(bad == 0, what << ": " << bad << " of " << got.size() << " differ, first at "
                               << first_bad << ": " << got[first_bad] << " vs " << want[first_bad]);
}

// Attends n_queries queries at positions n_keys.. over the head, in one job, and checks the
// output (and statistics) against the reference.
void check_attention(Formats call, Formats tier, int32_t n_keys, int32_t n_queries, bool stats,
                     const Options& o, uint32_t seed) {
  const std::string formats = std::string("call K ") + kvc_format_name(call.k) + " V " +
                              kvc_format_name(call.v) + ", tier K " + kvc_format_name(tier.k) +
                              " V " + kvc_format_name(tier.v);
  CAPTURE(formats);
  CAPTURE(n_keys);
  CAPTURE(n_queries);
  CAPTURE(stats);
  CAPTURE(o.window);
  CAPTURE(o.softcap);
  ref::Rng rng(seed);
  const Head head(call, tier, n_keys, rng);
  const std::vector<float> q = rng.vec(size_t(n_queries) * kGroup * kDim);
  std::vector<int32_t> q_pos(static_cast<size_t>(n_queries));
  for (int32_t i = 0; i < n_queries; ++i) q_pos[size_t(i)] = n_keys + i;
  std::vector<float> out(q.size(), -7.0f);
  const size_t tokens = head.tokens();
  // attn_sum accumulates: it starts at 1, attn_last and attn_window are overwritten.
  std::vector<float> sum(tokens, 1.0f), last(tokens, 5.0f), window(tokens, 5.0f);

  Instance backend;
  kvc_attend_job job{};
  job.struct_size = sizeof(job);
  job.n_queries = n_queries;
  job.q = q.data();
  job.q_stride = kGroup * kDim;
  job.q_dtype = KVC_DTYPE_F32;
  job.q_pos = q_pos.data();
  job.out = out.data();
  job.out_stride = kGroup * kDim;
  job.segments = head.abi.data();
  job.n_segments = int32_t(head.abi.size());
  if (stats) job.stats = {sum.data(), last.data(), window.data()};
  kvc_attend_call c{};
  c.struct_size = sizeof(c);
  c.head_dim = kDim;
  c.group_size = kGroup;
  c.storage_dtype = call.k;
  c.v_dtype = call.v;
  c.scale = o.scale;
  c.sliding_window = o.window;
  c.softcap = o.softcap;
  c.observation_window = o.observation_window;
  c.jobs = &job;
  c.n_jobs = 1;
  kvc_plugin_error error{};
  REQUIRE_MESSAGE(backend.cpu->attend(backend.instance, &c, &error) == KVC_OK, error.message);

  Expected e = reference(head, q, q_pos, o);
  check_close(out, e.out, "output");
  if (!stats) return;
  for (double& s : e.sum) s += 1.0;
  check_close(sum, e.sum, "attn_sum");
  check_close(last, e.last, "attn_last");
  check_close(window, e.window, "attn_window");
}

const Formats kPairs[][2] = {
    {{KVC_DTYPE_F16, KVC_DTYPE_F16}, {KVC_DTYPE_Q4_0, KVC_DTYPE_Q4_0}},
    {{KVC_DTYPE_F32, KVC_DTYPE_F32}, {KVC_DTYPE_Q8_0, KVC_DTYPE_Q8_0}},
    {{KVC_DTYPE_BF16, KVC_DTYPE_BF16}, {KVC_DTYPE_Q4_0, KVC_DTYPE_Q4_0}},
    {{KVC_DTYPE_Q8_0, KVC_DTYPE_F16}, {KVC_DTYPE_F16, KVC_DTYPE_Q4_0}},
};

// One query token (kGroup heads, f32) at `q_pos` over `segments`, as one attend call whose own
// formats are `call_format` for K and V.
struct OneQuery {
  OneQuery(ref::Rng& rng, int32_t position, const kvc_segment* segments, size_t n_segments,
           kvc_dtype call_format)
      : q(rng.vec(kGroup * kDim)), out(q.size()), q_pos(position) {
    job.struct_size = sizeof(job);
    job.n_queries = 1;
    job.q = q.data();
    job.q_stride = kGroup * kDim;
    job.q_dtype = KVC_DTYPE_F32;
    job.q_pos = &q_pos;
    job.out = out.data();
    job.out_stride = kGroup * kDim;
    job.segments = segments;
    job.n_segments = int32_t(n_segments);
    call.struct_size = sizeof(call);
    call.head_dim = kDim;
    call.group_size = kGroup;
    call.storage_dtype = call.v_dtype = call_format;
    call.scale = 1.0f;
    call.jobs = &job;
    call.n_jobs = 1;
  }
  OneQuery(const OneQuery&) = delete;
  OneQuery& operator=(const OneQuery&) = delete;

  std::vector<float> q, out;
  const int32_t q_pos;
  kvc_attend_job job{};
  kvc_attend_call call{};
};

}  // namespace

TEST_CASE("mixed formats: attention over a head whose demoted tier holds other formats") {
  // A scale of 4 makes the softmax peaked enough that scoring a key with the wrong query row
  // (rounded or not) moves the output well past the tolerance.
  Options plain;
  plain.scale = 4.0f;
  // Windows reaching into the demoted tier, and a soft-cap that bends the largest logits.
  Options windowed = plain;
  windowed.window = 100;
  windowed.softcap = 12.0f;
  Options windowed_long = windowed;
  windowed_long.window = 1200;
  uint32_t seed = 1;
  for (const auto& pair : kPairs) {
    for (const bool stats : {false, true}) {
      // Short: one tile of each run; long (> 2048 keys): split-K without statistics.
      check_attention(pair[0], pair[1], 150, 1, stats, plain, seed++);
      check_attention(pair[0], pair[1], 150, 5, stats, windowed, seed++);
      check_attention(pair[0], pair[1], 3000, 1, stats, plain, seed++);
      check_attention(pair[0], pair[1], 3000, 3, stats, windowed_long, seed++);
    }
  }
}

TEST_CASE("mixed formats: statistics scored again when the kept logits would not fit") {
  // 16 queries of 4 heads over 20000 keys keep more logits than a thread holds: the statistics
  // pass scores each tile again, with the query row of its K format.
  Options o;
  o.scale = 4.0f;
  o.observation_window = 5;
  check_attention(kPairs[0][0], kPairs[0][1], 20000, 16, true, o, 99);
  check_attention(kPairs[3][0], kPairs[3][1], 20000, 16, true, o, 100);
}

TEST_CASE("mixed formats: a segment written by a host older than 1.6 has the call's formats") {
  // Segments of 1.5's size, packed: the bytes past each one's struct_size are the next
  // segment's (or 0xff after the last), which read as own_formats would be nonzero.
  ref::Rng rng(7);
  const Formats call{KVC_DTYPE_F16, KVC_DTYPE_F16};
  const Head head(call, call, 80, rng);
  const size_t old_size = offsetof(kvc_segment, own_formats);
  std::vector<unsigned char> packed(head.abi.size() * old_size + sizeof(kvc_segment), 0xff);
  for (size_t s = 0; s < head.abi.size(); ++s) {
    kvc_segment segment = head.abi[s];
    segment.struct_size = uint32_t(old_size);
    std::memcpy(packed.data() + s * old_size, &segment, old_size);
  }
  OneQuery one(rng, 80, reinterpret_cast<const kvc_segment*>(packed.data()), head.abi.size(),
               call.k);
  std::vector<float>& q = one.q;
  std::vector<float>& out = one.out;
  const int32_t q_pos = one.q_pos;
  kvc_attend_call& c = one.call;
  Instance backend;
  kvc_plugin_error error{};
  REQUIRE_MESSAGE(backend.cpu->attend(backend.instance, &c, &error) == KVC_OK, error.message);
  Options o;
  check_close(out, reference(head, q, {q_pos}, o).out, "output");
}

TEST_CASE("mixed formats: convert writes the reference bytes for every pair of formats") {
  const kvc_dtype formats[] = {KVC_DTYPE_F32, KVC_DTYPE_F16, KVC_DTYPE_BF16, KVC_DTYPE_Q8_0,
                               KVC_DTYPE_Q4_0};
  constexpr int32_t kTokens = 7;
  // An instance that rotates K converts stored rows as they are: the rotation is per row.
  for (const kvc_rotation rotation : {KVC_ROTATION_NONE, KVC_ROTATION_HADAMARD}) {
    Instance backend(rotation);
    const bool has_convert = backend.cpu->convert != nullptr;
    REQUIRE(has_convert);
    ref::Rng rng(11);
    for (const kvc_dtype from : formats) {
      for (const kvc_dtype to : formats) {
        const std::string from_name = kvc_format_name(from), to_name = kvc_format_name(to);
        CAPTURE(from_name);
        CAPTURE(to_name);
        CAPTURE(int(rotation));
        // K from -> to, V to -> from; values up to 40 so that f16 and bf16 differ.
        std::vector<float> values = rng.vec(size_t(kTokens) * kDim);
        for (float& x : values) x *= 40.0f;
        Buffer src_k(kvc_format_row_bytes(from, kDim) * kTokens);
        Buffer src_v(kvc_format_row_bytes(to, kDim) * kTokens);
        Buffer dst_k(kvc_format_row_bytes(to, kDim) * kTokens);
        Buffer dst_v(kvc_format_row_bytes(from, kDim) * kTokens);
        const size_t k_bytes = kvc_format_row_bytes(to, kDim) * kTokens;
        const size_t v_bytes = kvc_format_row_bytes(from, kDim) * kTokens;
        std::vector<unsigned char> want_k(k_bytes), want_v(v_bytes);
        std::vector<float> row(kDim);
        for (int32_t t = 0; t < kTokens; ++t) {
          const float* x = values.data() + size_t(t) * kDim;
          unsigned char* sk = src_k.get() + size_t(t) * kvc_format_row_bytes(from, kDim);
          unsigned char* sv = src_v.get() + size_t(t) * kvc_format_row_bytes(to, kDim);
          kvc_format_row_from_f32(from, x, sk, kDim);
          kvc_format_row_from_f32(to, x, sv, kDim);
          kvc_format_row_to_f32(from, sk, row.data(), kDim);
          kvc_format_row_from_f32(to, row.data(),
                                  want_k.data() + size_t(t) * kvc_format_row_bytes(to, kDim), kDim);
          kvc_format_row_to_f32(to, sv, row.data(), kDim);
          kvc_format_row_from_f32(from, row.data(),
                                  want_v.data() + size_t(t) * kvc_format_row_bytes(from, kDim), kDim);
        }
        // Two jobs: the first rows and the rest.
        kvc_convert_job jobs[2]{};
        for (int32_t j = 0; j < 2; ++j) {
          const int32_t first = j == 0 ? 0 : 3;
          kvc_convert_job& job = jobs[j];
          job.struct_size = sizeof(job);
          job.n_tokens = j == 0 ? 3 : kTokens - 3;
          job.src_k = src_k.get() + first * kvc_format_row_bytes(from, kDim);
          job.src_v = src_v.get() + first * kvc_format_row_bytes(to, kDim);
          job.dst_k = dst_k.get() + first * kvc_format_row_bytes(to, kDim);
          job.dst_v = dst_v.get() + first * kvc_format_row_bytes(from, kDim);
          job.src_k_dtype = job.dst_v_dtype = from;
          job.src_v_dtype = job.dst_k_dtype = to;
        }
        kvc_convert_call call{};
        call.struct_size = sizeof(call);
        call.head_dim = kDim;
        call.jobs = jobs;
        call.n_jobs = 2;
        kvc_plugin_error error{};
        REQUIRE_MESSAGE(backend.cpu->convert(backend.instance, &call, &error) == KVC_OK,
                        error.message);
        CHECK(std::memcmp(dst_k.get(), want_k.data(), k_bytes) == 0);
        CHECK(std::memcmp(dst_v.get(), want_v.data(), v_bytes) == 0);
      }
    }
  }
}

TEST_CASE("mixed formats: convert refuses a bad job, naming it") {
  Instance backend;
  Buffer rows(kvc_format_row_bytes(KVC_DTYPE_F32, kDim) * 4);
  kvc_convert_job job{};
  job.struct_size = sizeof(job);
  job.n_tokens = 2;
  job.src_k = job.src_v = rows.get();
  job.dst_k = job.dst_v = rows.get() + kvc_format_row_bytes(KVC_DTYPE_F32, kDim) * 2;
  job.src_k_dtype = job.src_v_dtype = job.dst_k_dtype = job.dst_v_dtype = KVC_DTYPE_F32;
  kvc_convert_call call{};
  call.struct_size = sizeof(call);
  call.head_dim = kDim;
  call.jobs = &job;
  call.n_jobs = 1;
  kvc_plugin_error error{};
  auto refused = [&](const char* message) {
    CHECK(backend.cpu->convert(backend.instance, &call, &error) == KVC_ERR_INVALID_ARGUMENT);
    CHECK_MESSAGE(kvt::contains(error.message, message), error.message);
  };
  REQUIRE(backend.cpu->convert(backend.instance, &call, &error) == KVC_OK);
  job.n_tokens = 0;
  refused("convert job 0: n_tokens must be >= 1, got 0");
  job.n_tokens = 2;
  job.dst_v = nullptr;
  refused("convert job 0 has a NULL pointer");
  job.dst_v = job.dst_k;
  // 7: within the enum's range (loading anything beyond it is undefined), not a format.
  job.dst_k_dtype = kvc_dtype(7);
  refused("unknown storage dtype 7");
  job.dst_k_dtype = KVC_DTYPE_Q4_0;
  call.head_dim = 48;
  refused("head_dim 48 is not a multiple of q4_0's group of 32 values");
  call.struct_size = sizeof(call) - 1;
  call.head_dim = kDim;
  CHECK(backend.cpu->convert(backend.instance, &call, &error) == KVC_ERR_INVALID_ARGUMENT);
}

TEST_CASE("mixed formats: read_keys and read_tokens over a head of two tiers") {
  ref::Rng rng(21);
  const Formats call{KVC_DTYPE_F16, KVC_DTYPE_F16};
  const Head head(call, {KVC_DTYPE_Q4_0, KVC_DTYPE_Q8_0}, 100, rng);
  std::vector<float> keys(head.tokens() * kDim, -1.0f), want;
  std::vector<int32_t> positions(head.tokens(), -1), want_positions;
  for (const auto& s : head.segments) {
    want.insert(want.end(), s->k.decoded.begin(), s->k.decoded.end());
    want_positions.insert(want_positions.end(), s->pos.begin(), s->pos.end());
  }
  Instance backend;
  kvc_plugin_error error{};
  kvc_read_keys_job job{};
  job.struct_size = sizeof(job);
  job.n_segments = int32_t(head.abi.size());
  job.segments = head.abi.data();
  job.out = keys.data();
  kvc_read_keys_call c{};
  c.struct_size = sizeof(c);
  c.head_dim = kDim;
  c.storage_dtype = call.k;
  c.jobs = &job;
  c.n_jobs = 1;
  REQUIRE_MESSAGE(backend.cpu->read_keys(backend.instance, &c, &error) == KVC_OK, error.message);
  CHECK(keys == want);

  kvc_read_tokens_job tokens_job{};
  tokens_job.struct_size = sizeof(tokens_job);
  tokens_job.n_segments = int32_t(head.abi.size());
  tokens_job.segments = head.abi.data();
  tokens_job.out_pos = positions.data();
  kvc_read_tokens_call tokens_call{};
  tokens_call.struct_size = sizeof(tokens_call);
  tokens_call.jobs = &tokens_job;
  tokens_call.n_jobs = 1;
  REQUIRE_MESSAGE(backend.cpu->read_tokens(backend.instance, &tokens_call, &error) == KVC_OK,
                  error.message);
  CHECK(positions == want_positions);

  // A segment whose format does not fit head_dim (which the call's f16 fits) is named.
  c.head_dim = 48;
  CHECK(backend.cpu->read_keys(backend.instance, &c, &error) == KVC_ERR_INVALID_ARGUMENT);
  CHECK_MESSAGE(kvt::contains(error.message, "read_keys job 0: segment 0's format q4_0 does not "
                                             "divide head_dim 48"),
                error.message);
}

TEST_CASE("mixed formats: compact moves rows within a tier and refuses a move across tiers") {
  ref::Rng rng(31);
  const Formats call{KVC_DTYPE_F16, KVC_DTYPE_BF16};
  const Formats tier{KVC_DTYPE_Q4_0, KVC_DTYPE_Q8_0};
  // Storage: tier [0, 4), then the call's formats [4, 10).
  Segment demoted(tier, true, {10, 11, 12, 13}, rng);
  Segment recent(call, false, {0, 1, 2, 3, 20, 21}, rng);
  const kvc_segment segments[] = {demoted.abi(), recent.abi()};
  const size_t tier_k = kvc_format_row_bytes(tier.k, kDim);
  const size_t call_k = kvc_format_row_bytes(call.k, kDim), call_v = kvc_format_row_bytes(call.v, kDim);
  const std::vector<unsigned char> demoted_k(demoted.k.bytes.get(), demoted.k.bytes.get() + 4 * tier_k);
  const std::vector<unsigned char> recent_k(recent.k.bytes.get(), recent.k.bytes.get() + 6 * call_k);
  const std::vector<unsigned char> recent_v(recent.v.bytes.get(), recent.v.bytes.get() + 6 * call_v);
  std::vector<float> sum = {0, 1, 2, 3, 4, 5, 6, 7, 8, 9};

  Instance backend;
  kvc_plugin_error error{};
  kvc_compact_job job{};
  job.struct_size = sizeof(job);
  job.n_segments = 2;
  job.segments = segments;
  job.stats.attn_sum = sum.data();
  kvc_compact_call c{};
  c.struct_size = sizeof(c);
  c.head_dim = kDim;
  c.storage_dtype = call.k;
  c.v_dtype = call.v;
  c.jobs = &job;
  c.n_jobs = 1;
  // keep[3] = 4 would move the call-format row at index 4 into index 3, the tier's.
  const int32_t across[] = {0, 1, 2, 4, 5};
  job.keep = across;
  job.n_keep = 5;
  CHECK(backend.cpu->compact(backend.instance, &c, &error) == KVC_ERR_INVALID_ARGUMENT);
  CHECK_MESSAGE(kvt::contains(error.message, "compact job 0: keep[3] = 4"), error.message);
  CHECK(sum == std::vector<float>{0, 1, 2, 3, 4, 5, 6, 7, 8, 9});  // nothing moved
  CHECK(std::memcmp(recent.k.bytes.get(), recent_k.data(), recent_k.size()) == 0);

  // Dropping a row of the tier shifts the call's rows into it: refused as well.
  const int32_t shrinking_tier[] = {0, 2, 3, 4, 6, 7, 8, 9};
  job.keep = shrinking_tier;
  job.n_keep = 8;
  CHECK(backend.cpu->compact(backend.instance, &c, &error) == KVC_ERR_INVALID_ARGUMENT);

  // Keeping the whole tier and dropping call-format rows 5 and 7: moves within the call's rows.
  const int32_t within[] = {0, 1, 2, 3, 4, 6, 8, 9};
  job.keep = within;
  job.n_keep = 8;
  REQUIRE_MESSAGE(backend.cpu->compact(backend.instance, &c, &error) == KVC_OK, error.message);
  CHECK(std::memcmp(demoted.k.bytes.get(), demoted_k.data(), demoted_k.size()) == 0);
  const size_t moved[] = {0, 2, 4, 5};  // recent's rows at 0..3 now
  for (size_t i = 0; i < 4; ++i) {
    CAPTURE(i);
    CHECK(std::memcmp(recent.k.bytes.get() + i * call_k, recent_k.data() + moved[i] * call_k,
                      call_k) == 0);
    CHECK(std::memcmp(recent.v.bytes.get() + i * call_v, recent_v.data() + moved[i] * call_v,
                      call_v) == 0);
  }
  CHECK(std::vector<int32_t>(recent.pos.begin(), recent.pos.begin() + 4) ==
        std::vector<int32_t>{0, 2, 20, 21});
  CHECK(std::vector<float>(sum.begin(), sum.begin() + 8) ==
        std::vector<float>{0, 1, 2, 3, 4, 6, 8, 9});
}

TEST_CASE("mixed formats: attention refuses a segment format that does not fit") {
  ref::Rng rng(41);
  const Formats call{KVC_DTYPE_F16, KVC_DTYPE_F16};
  Head head(call, {KVC_DTYPE_Q8_0, KVC_DTYPE_Q8_0}, 40, rng);
  OneQuery one(rng, 40, head.abi.data(), head.abi.size(), call.k);
  std::vector<float>& q = one.q;
  kvc_attend_job& job = one.job;
  kvc_attend_call& c = one.call;
  Instance backend;
  kvc_plugin_error error{};
  head.abi[0].v_dtype = kvc_dtype(6);  // within the enum's range, not a format
  CHECK(backend.cpu->attend(backend.instance, &c, &error) == KVC_ERR_INVALID_ARGUMENT);
  CHECK_MESSAGE(kvt::contains(error.message, "attend job 0: segment 0 has unknown storage dtype 6"),
                error.message);
  // f16 queries are a query dtype of f16 and of q8_0 keys alike; not of f32 keys.
  head.abi[0].v_dtype = KVC_DTYPE_Q8_0;
  std::vector<uint16_t> q16(q.size());
  for (size_t i = 0; i < q.size(); ++i) q16[i] = kvc_f32_to_f16(q[i]);
  job.q = q16.data();
  job.q_dtype = KVC_DTYPE_F16;
  CHECK_MESSAGE(backend.cpu->attend(backend.instance, &c, &error) == KVC_OK, error.message);
  head.abi[0].k_dtype = KVC_DTYPE_F32;
  CHECK(backend.cpu->attend(backend.instance, &c, &error) == KVC_ERR_INVALID_ARGUMENT);
  CHECK_MESSAGE(kvt::contains(error.message, "segment 0's K format f32 cannot take query dtype 1"),
                error.message);
}
