// Attention through the C API against the naive double-precision reference
// (reference_attention.hpp), over many shapes, dtypes, layouts and batch schedules.
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <map>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "host_reads.hpp"
#include "kvcache/kvcache.h"
#include "kvcache/kvcache_format.h"
#include "kvcache/kvcache_half.h"
#include "reference_attention.hpp"
#include "test_support.hpp"

namespace {

enum Mode { kSeparate = 0, kCombined = 1, kAlternate = 2 };

struct Scenario {
  const char* name;
  int batch;
  int q_heads;
  int kv_heads;
  int head_dim;
  int layers;
  kvc_dtype dtype;
  kvc_layout layout;
  int block_tokens;
  double growth;
  kvc_dtype kv_input;  // dtype of K/V passed in: f32 or the storage formats (K's, V's)
  kvc_dtype q_input;   // dtype of Q passed in
  int window;
  float softcap;
  float scale;         // 0: default 1/sqrt(d)
  Mode mode;
  int pos_stride;      // distance between consecutive positions of a sequence
  size_t pad;          // extra elements at the end of every tensor row (row_stride > heads*d)
  int v_storage = -1;  // the storage format of V; -1: dtype's, as K's

  kvc_dtype v_dtype() const { return v_storage < 0 ? dtype : static_cast<kvc_dtype>(v_storage); }
  // V's input: f32, or V's storage format; a quantized V takes K's f16 or bf16 as it is.
  kvc_dtype v_input() const {
    if (kv_input == KVC_DTYPE_F32 || kvc_format_has_scales(v_dtype())) return kv_input;
    return v_dtype();
  }
};

double tolerance(kvc_dtype storage) { return storage == KVC_DTYPE_F32 ? 1e-5 : 2e-3; }

const char* dtype_name(kvc_dtype d) { return kvc_format_name(d); }

std::string describe(const Scenario& s) {
  std::ostringstream o;
  o << s.name << " [batch=" << s.batch << " q/kv=" << s.q_heads << "/" << s.kv_heads
    << " d=" << s.head_dim << " layers=" << s.layers << " dtype=" << dtype_name(s.dtype)
    << " v_dtype=" << dtype_name(s.v_dtype())
    << " layout=" << (s.layout == KVC_LAYOUT_PAGED ? "paged" : "contiguous")
    << " block_tokens=" << s.block_tokens << " growth=" << s.growth
    << " kv_in=" << dtype_name(s.kv_input) << " q_in=" << dtype_name(s.q_input)
    << " window=" << s.window << " softcap=" << s.softcap << " scale=" << s.scale
    << " mode=" << s.mode << " pos_stride=" << s.pos_stride << " pad=" << s.pad << "]";
  return o.str();
}

// Packs rows of `width` floats into rows of `width + pad` elements of `dtype`.
std::vector<unsigned char> pack(const std::vector<float>& v, size_t width, size_t pad,
                                kvc_dtype dtype) {
  const size_t rows = v.size() / width;
  std::vector<float> padded(rows * (width + pad), 7.0f);  // padding holds junk
  for (size_t r = 0; r < rows; ++r)
    std::copy(v.begin() + r * width, v.begin() + (r + 1) * width,
              padded.begin() + r * (width + pad));
  return ref::encode(padded, static_cast<int>(dtype));
}

// Values as they come back from `dtype`: rounded one by one, or for a quantized format in
// its groups by the format table's reference conversion (rows of the tensors hold whole
// groups, head_dim being a multiple of the group size).
std::vector<float> rounded(const std::vector<float>& v, kvc_dtype dtype) {
  std::vector<float> r(v.size());
  if (kvc_format_has_scales(dtype)) {
    std::vector<unsigned char> bytes(kvc_format_row_bytes(dtype, v.size()));
    REQUIRE(kvc_format_row_from_f32(dtype, v.data(), bytes.data(), v.size()));
    REQUIRE(kvc_format_row_to_f32(dtype, bytes.data(), r.data(), v.size()));
    return r;
  }
  for (size_t i = 0; i < v.size(); ++i) r[i] = ref::round_to_dtype(v[i], static_cast<int>(dtype));
  return r;
}

struct Worst {
  double err = 0.0;
  std::string where;
};

class Harness {
 public:
  explicit Harness(const Scenario& s, uint32_t seed = 1234)
      : sc_(s), rng_(seed), ctx_(kvt::make_context()) {
    kvc_cache_params p;
    kvc_cache_params_init(&p);
    p.layers = s.layers;
    p.kv_heads = s.kv_heads;
    p.q_heads = s.q_heads;
    p.head_dim = s.head_dim;
    p.dtype = s.dtype;
    p.v_dtype = s.v_storage;
    p.layout = s.layout;
    p.block_tokens = s.block_tokens;
    p.growth_factor = s.growth;
    cache_ = kvt::make_cache(ctx_.get(), p);
    for (int i = 0; i < s.batch; ++i) {
      const int32_t id = 3 * i + 2;  // ids that are neither 0-based nor dense
      ids_.push_back(id);
      KVT_REQUIRE_OK(kvc_seq_create(cache_.get(), id));
      hist_[id] = std::vector<ref::History>(s.layers, ref::History(s.kv_heads, s.head_dim));
      next_pos_[id] = (i * 37) % 100;  // sequences start at different positions
    }
  }

  kvc_cache* cache() { return cache_.get(); }
  const std::vector<int32_t>& ids() const { return ids_; }

  // One step on every layer: sequence seqs[i] gets ntok[i] new tokens.
  void step(const std::vector<int32_t>& seqs, const std::vector<int32_t>& ntok, bool combined) {
    const int hd = sc_.head_dim;
    const size_t kv_w = static_cast<size_t>(sc_.kv_heads) * hd;
    const size_t q_w = static_cast<size_t>(sc_.q_heads) * hd;
    std::vector<int32_t> positions;
    for (size_t i = 0; i < seqs.size(); ++i)
      for (int32_t j = 0; j < ntok[i]; ++j)
        positions.push_back(next_pos_[seqs[i]] + j * sc_.pos_stride);
    const size_t total = positions.size();
    kvc_batch batch;
    kvc_batch_init(&batch, static_cast<int32_t>(seqs.size()), seqs.data(), ntok.data(),
                   positions.data());

    for (int layer = 0; layer < sc_.layers; ++layer) {
      const std::vector<float> k = rng_.vec(total * kv_w);
      const std::vector<float> v = rng_.vec(total * kv_w);
      const std::vector<float> q = rng_.vec(total * q_w);
      const std::vector<unsigned char> kb = pack(k, kv_w, sc_.pad, sc_.kv_input);
      const std::vector<unsigned char> vb = pack(v, kv_w, sc_.pad, sc_.v_input());
      const std::vector<unsigned char> qb = pack(q, q_w, sc_.pad, sc_.q_input);
      const size_t kv_stride = sc_.pad ? kv_w + sc_.pad : 0;
      const size_t q_stride = sc_.pad ? q_w + sc_.pad : 0;
      const kvc_tensor kt = kvt::tensor(kb.data(), sc_.kv_input, kv_stride);
      const kvc_tensor vt = kvt::tensor(vb.data(), sc_.v_input(), kv_stride);
      const kvc_tensor qt = kvt::tensor(qb.data(), sc_.q_input, q_stride);
      const size_t out_w = q_w + sc_.pad;
      std::vector<float> out(total * out_w, std::numeric_limits<float>::quiet_NaN());
      kvc_tensor_mut ot = kvt::tensor_mut(out.data(), sc_.pad ? out_w : 0);
      kvc_attention_params ap;
      kvc_attention_params_init(&ap);
      ap.scale = sc_.scale;
      ap.sliding_window = sc_.window;
      ap.softcap = sc_.softcap;

      if (combined) {
        KVT_REQUIRE_OK(kvc_append_attend(cache_.get(), layer, &batch, &qt, &kt, &vt, &ap, &ot));
      } else {
        KVT_REQUIRE_OK(kvc_append(cache_.get(), layer, &batch, &kt, &vt));
        KVT_REQUIRE_OK(kvc_attend(cache_.get(), layer, &batch, &qt, &ap, &ot));
      }

      // The reference sees the inputs rounded through the storage dtype (K, V) and through
      // the dtype they were passed in (Q).
      const std::vector<float> kr = rounded(rounded(k, sc_.kv_input), sc_.dtype);
      const std::vector<float> vr = rounded(rounded(v, sc_.v_input()), sc_.v_dtype());
      const std::vector<float> qr = rounded(q, sc_.q_input);
      size_t row = 0;
      for (size_t i = 0; i < seqs.size(); ++i) {
        ref::History& h = hist_[seqs[i]][layer];
        for (int32_t j = 0; j < ntok[i]; ++j)
          h.append(positions[row + j], &kr[(row + j) * kv_w], &vr[(row + j) * kv_w]);
        row += ntok[i];
      }
      compare(seqs, ntok, positions, qr, out, out_w, layer, combined ? "append_attend" : "attend");
    }
    for (size_t i = 0; i < seqs.size(); ++i) next_pos_[seqs[i]] += ntok[i] * sc_.pos_stride;
    ++steps_;
    check_lengths();
  }

  // Attends (without appending) queries at already stored positions of every sequence.
  void reattend_history() {
    const size_t q_w = static_cast<size_t>(sc_.q_heads) * sc_.head_dim;
    std::vector<int32_t> seqs, ntok, positions;
    for (int32_t id : ids_) {
      const ref::History& h = hist_[id][0];
      if (h.tokens() == 0) continue;
      seqs.push_back(id);
      const std::vector<int32_t> picks = {h.pos.front(), h.pos[h.tokens() / 2], h.pos.back()};
      ntok.push_back(static_cast<int32_t>(picks.size()));
      positions.insert(positions.end(), picks.begin(), picks.end());
    }
    kvc_batch batch;
    kvc_batch_init(&batch, static_cast<int32_t>(seqs.size()), seqs.data(), ntok.data(),
                   positions.data());
    kvc_attention_params ap;
    kvc_attention_params_init(&ap);
    ap.scale = sc_.scale;
    ap.sliding_window = sc_.window;
    ap.softcap = sc_.softcap;
    for (int layer = 0; layer < sc_.layers; ++layer) {
      const std::vector<float> q = rng_.vec(positions.size() * q_w);
      const std::vector<unsigned char> qb = pack(q, q_w, 0, sc_.q_input);
      const kvc_tensor qt = kvt::tensor(qb.data(), sc_.q_input);
      std::vector<float> out(positions.size() * q_w, std::numeric_limits<float>::quiet_NaN());
      kvc_tensor_mut ot = kvt::tensor_mut(out.data());
      KVT_REQUIRE_OK(kvc_attend(cache_.get(), layer, &batch, &qt, &ap, &ot));
      compare(seqs, ntok, positions, rounded(q, sc_.q_input), out, q_w, layer, "re-attend");
    }
  }

  void check_stats() {
    const kvc_cache_stats s = kvt::get_stats(cache_.get());
    uint64_t tokens = 0;
    for (auto& kv : hist_)
      for (const ref::History& h : kv.second) tokens += h.tokens() * sc_.kv_heads;
    CHECK(s.tokens_stored == tokens);
    CHECK(s.sequences == sc_.batch);
    CHECK(s.tokens_evicted == 0);
    CHECK(s.bytes_used > 0);
    CHECK(s.bytes_peak >= s.bytes_used);
    CHECK(s.bytes_used <= s.bytes_limit);
    if (sc_.layout == KVC_LAYOUT_PAGED) {
      CHECK(s.bytes_copied == 0);
      // Each (sequence, layer, KV head) owns its blocks: at least ceil(len / block_tokens).
      size_t min_blocks = 0;
      for (auto& kv : hist_)
        for (const ref::History& h : kv.second)
          min_blocks += sc_.kv_heads * ((h.tokens() + sc_.block_tokens - 1) / sc_.block_tokens);
      CHECK(s.blocks_used >= min_blocks);
    }
  }

  double max_err() const { return max_err_; }

 private:
  void compare(const std::vector<int32_t>& seqs, const std::vector<int32_t>& ntok,
               const std::vector<int32_t>& positions, const std::vector<float>& qr,
               const std::vector<float>& out, size_t out_w, int layer, const char* how) {
    const int hd = sc_.head_dim;
    const size_t q_w = static_cast<size_t>(sc_.q_heads) * hd;
    ref::Options opt;
    opt.scale = sc_.scale;
    opt.window = sc_.window;
    opt.softcap = sc_.softcap;
    opt.query_format = kvc_format_query_format(sc_.dtype);
    std::vector<double> expect(q_w);
    Worst worst;
    bool padding_ok = true;
    size_t row = 0;
    for (size_t i = 0; i < seqs.size(); ++i) {
      const ref::History& h = hist_[seqs[i]][layer];
      for (int32_t j = 0; j < ntok[i]; ++j, ++row) {
        ref::attend(h, sc_.q_heads, &qr[row * q_w], positions[row], opt, expect.data());
        for (size_t e = 0; e < q_w; ++e) {
          const double got = out[row * out_w + e];
          const double err = std::isnan(got) ? INFINITY : std::fabs(got - expect[e]);
          if (err > worst.err || (std::isnan(got) && worst.where.empty())) {
            std::ostringstream o;
            o << how << " step " << steps_ << " layer " << layer << " seq " << seqs[i]
              << " token " << j << "/" << ntok[i] << " pos " << positions[row] << " head "
              << e / hd << " dim " << e % hd << " (stored " << h.tokens()
              << "): expected " << expect[e] << " got " << got;
            worst.err = err;
            worst.where = o.str();
          }
        }
        for (size_t e = q_w; e < out_w; ++e)
          if (!std::isnan(out[row * out_w + e])) padding_ok = false;
      }
    }
    max_err_ = std::max(max_err_, worst.err);
    INFO(describe(sc_));
    INFO("worst: " << worst.where);
    CHECK(worst.err <= std::max(tolerance(sc_.dtype), tolerance(sc_.v_dtype())));
    CHECK_MESSAGE(padding_ok, "attention wrote into the padding between output rows");
  }

  void check_lengths() {
    for (auto& kv : hist_)
      for (int layer = 0; layer < sc_.layers; ++layer)
        for (int head = 0; head < sc_.kv_heads; ++head) {
          const int32_t n = kvt::seq_length(cache_.get(), kv.first, layer, head);
          INFO(describe(sc_) << " seq " << kv.first << " layer " << layer << " head " << head);
          CHECK(n == static_cast<int32_t>(kv.second[layer].tokens()));
        }
  }

  Scenario sc_;
  ref::Rng rng_;
  kvt::ContextPtr ctx_;
  kvt::CachePtr cache_;
  std::vector<int32_t> ids_;
  std::map<int32_t, std::vector<ref::History>> hist_;
  std::map<int32_t, int32_t> next_pos_;
  int steps_ = 0;
  double max_err_ = 0.0;
};

// Prefill chunks of different lengths, decode steps, a mixed prefill/decode batch in another
// order, decode steps on a subset, then queries at old positions.
void run_schedule(const Scenario& s) {
  INFO(describe(s));
  Harness h(s);
  const std::vector<int32_t>& ids = h.ids();
  const int n = static_cast<int>(ids.size());
  int step_index = 0;
  auto combined = [&]() {
    const bool c = s.mode == kCombined || (s.mode == kAlternate && step_index % 2 == 1);
    ++step_index;
    return c;
  };
  auto all = [&](int32_t tokens_for_first, int32_t spread) {
    std::vector<int32_t> nt(n);
    for (int i = 0; i < n; ++i) nt[i] = tokens_for_first + (i * spread) % 9;
    return nt;
  };

  // chunk of 17 (+ a different amount per sequence)
  h.step(ids, all(17, 5), combined());
  // 3 decode steps, the second in reverse order
  for (int d = 0; d < 3; ++d) {
    std::vector<int32_t> order = ids;
    if (d == 1) std::reverse(order.begin(), order.end());
    h.step(order, std::vector<int32_t>(n, 1), combined());
  }
  // chunk of 33 for half the batch while the other half decodes, in a rotated order
  {
    std::vector<int32_t> order = ids, nt;
    std::rotate(order.begin(), order.begin() + n / 2, order.end());
    for (int i = 0; i < n; ++i) nt.push_back(i % 2 == 0 ? 33 - i : 1);
    h.step(order, nt, combined());
  }
  // decodes: everyone, then a subset
  h.step(ids, std::vector<int32_t>(n, 1), combined());
  {
    std::vector<int32_t> sub;
    for (int i = 0; i < n; ++i)
      if (i % 3 != 1) sub.push_back(ids[i]);
    h.step(sub, std::vector<int32_t>(sub.size(), 1), combined());
  }
  // a second chunk for everyone
  h.step(ids, all(9, 4), combined());
  h.reattend_history();
  h.check_stats();
  MESSAGE(s.name << ": max abs error " << h.max_err());
}

constexpr kvc_dtype F32 = KVC_DTYPE_F32;
constexpr kvc_dtype F16 = KVC_DTYPE_F16;
constexpr kvc_dtype BF16 = KVC_DTYPE_BF16;
constexpr kvc_dtype Q8 = KVC_DTYPE_Q8_0;
constexpr kvc_dtype Q4 = KVC_DTYPE_Q4_0;
constexpr kvc_layout PAGED = KVC_LAYOUT_PAGED;
constexpr kvc_layout CONTIG = KVC_LAYOUT_CONTIGUOUS;

// name, batch, q, kv, d, layers, dtype, layout, block_tokens, growth, kv_in, q_in,
// window, softcap, scale, mode, pos_stride, pad
const Scenario kF32[] = {
    {"f32 paged16 single", 1, 8, 8, 64, 1, F32, PAGED, 16, 2.0, F32, F32, 0, 0, 0, kSeparate, 1, 0},
    {"f32 paged5 gqa4 d40 2 layers", 3, 8, 2, 40, 2, F32, PAGED, 5, 2.0, F32, F32, 0, 0, 0, kCombined, 1, 0},
    {"f32 contiguous x2 32/8 d128", 4, 32, 8, 128, 1, F32, CONTIG, 16, 2.0, F32, F32, 0, 0, 0, kAlternate, 1, 0},
    {"f32 contiguous x1.5 d8 3 layers", 8, 8, 2, 8, 3, F32, CONTIG, 16, 1.5, F32, F32, 0, 0, 0, kSeparate, 1, 0},
    {"f32 paged1 8/8 d8", 2, 8, 8, 8, 1, F32, PAGED, 1, 2.0, F32, F32, 0, 0, 0, kAlternate, 1, 0},
};

const Scenario kHalf[] = {
    {"f16 paged16 32/8 d128 f32 in", 2, 32, 8, 128, 1, F16, PAGED, 16, 2.0, F32, F32, 0, 0, 0, kCombined, 1, 0},
    {"f16 contiguous x2 d64 f16 in", 5, 8, 8, 64, 2, F16, CONTIG, 16, 2.0, F16, F16, 0, 0, 0, kAlternate, 1, 0},
    {"bf16 paged5 gqa4 d40 f32 in", 3, 8, 2, 40, 1, BF16, PAGED, 5, 2.0, F32, F32, 0, 0, 0, kSeparate, 1, 0},
    {"bf16 contiguous x1.5 d8 bf16 in", 2, 8, 8, 8, 2, BF16, CONTIG, 16, 1.5, BF16, BF16, 0, 0, 0, kCombined, 1, 0},
    {"f16 paged5 8/2 d40 f16 kv f32 q", 4, 8, 2, 40, 1, F16, PAGED, 5, 2.0, F16, F32, 0, 0, 0, kAlternate, 1, 0},
};

const Scenario kMasks[] = {
    {"window 7 softcap 5 gaps", 3, 8, 2, 64, 2, F32, PAGED, 5, 2.0, F32, F32, 7, 5.0f, 0, kAlternate, 2, 0},
    {"window 16 f16 contiguous", 2, 32, 8, 40, 1, F16, CONTIG, 16, 2.0, F32, F32, 16, 0, 0, kSeparate, 1, 0},
    {"softcap 0.5 scale 2 bf16", 3, 8, 2, 64, 1, BF16, PAGED, 16, 2.0, BF16, F32, 0, 0.5f, 2.0f, kAlternate, 1, 0},
    {"window 1 (only itself)", 8, 32, 8, 64, 1, F32, PAGED, 5, 2.0, F32, F32, 1, 0, 0, kCombined, 1, 0},
    {"window 20 softcap 1 contiguous x1.5", 3, 8, 8, 40, 2, F32, CONTIG, 16, 1.5, F32, F32, 20, 1.0f, 0.3f, kAlternate, 3, 0},
};

// K and V stored in different formats (kvc_cache_params::v_dtype), passed as f32 or each as
// its own storage format.
const Scenario kMixed[] = {
    {"f16 K f32 V paged5 gqa4 d40", 3, 8, 2, 40, 2, F16, PAGED, 5, 2.0, F32, F32, 0, 0, 0, kAlternate, 1, 0, F32},
    {"f32 K bf16 V contiguous 32/8 d64 own in", 2, 32, 8, 64, 1, F32, CONTIG, 16, 1.5, F32, F32, 0, 0, 0, kCombined, 1, 0, BF16},
    {"bf16 K f16 V paged16 d8 own in window 9", 4, 8, 8, 8, 1, BF16, PAGED, 16, 2.0, BF16, BF16, 9, 0, 0, kSeparate, 1, 0, F16},
    {"f16 K f32 V paged16 d33 padded, own in", 2, 8, 2, 33, 1, F16, PAGED, 3, 2.0, F16, F32, 0, 2.0f, 0, kAlternate, 1, 5, F32},
};

// Quantized K and V (kvcache_format.h), passed as f32, f16 or bf16; the reference sees the
// rows dequantized.
const Scenario kQuantized[] = {
    {"q8_0 paged16 32/8 d128 f32 in", 2, 32, 8, 128, 1, Q8, PAGED, 16, 2.0, F32, F32, 0, 0, 0, kCombined, 1, 0},
    {"q4_0 contiguous 8/2 d64 f16 in", 3, 8, 2, 64, 2, Q4, CONTIG, 16, 2.0, F16, F16, 0, 0, 0, kAlternate, 1, 0},
    {"q8_0 K q4_0 V paged5 gqa4 d64 bf16 in window 9", 3, 8, 2, 64, 1, Q8, PAGED, 5, 2.0, BF16, F32, 9, 0, 0, kSeparate, 1, 0, Q4},
    {"q4_0 K f16 V paged3 d32 padded softcap", 2, 8, 8, 32, 1, Q4, PAGED, 3, 2.0, F32, F32, 0, 2.0f, 0, kAlternate, 1, 5, F16},
};

const Scenario kStrides[] = {
    {"padded rows f32 paged16 32/8", 6, 32, 8, 64, 2, F32, PAGED, 16, 2.0, F32, F32, 0, 0, 0, kAlternate, 1, 24},
    {"padded rows f16 contiguous window 40", 4, 8, 2, 128, 1, F16, CONTIG, 16, 1.5, F16, F32, 40, 0, 0, kCombined, 1, 8},
};

}  // namespace

TEST_CASE("attention: f32 storage matches the reference") {
  for (const Scenario& s : kF32) run_schedule(s);
}

TEST_CASE("attention: f16 and bf16 storage match the reference on rounded inputs") {
  for (const Scenario& s : kHalf) run_schedule(s);
}

TEST_CASE("attention: sliding window, soft-cap and explicit scale") {
  for (const Scenario& s : kMasks) run_schedule(s);
}

TEST_CASE("attention: K and V in different formats match the reference") {
  // The cuda backend's kernels read K and V of one format, and a backend built against a
  // plugin ABI before 1.3 has no V format: both refuse a cache of two when it is created,
  // naming them.
  const std::string backend = kvt::test_backend() ? kvt::test_backend() : "";
  if (backend == "cuda" || backend == "counting_1_0") {
    kvt::ContextPtr ctx = kvt::make_context();
    kvc_cache_params p;
    kvc_cache_params_init(&p);
    p.head_dim = 8;
    p.dtype = F16;
    p.v_dtype = F32;
    p.backend = backend.c_str();
    kvc_cache* raw = nullptr;
    kvt::Status st{kvc_cache_create(ctx.get(), &p, &raw)};
    CHECK(st.code() == KVC_ERR_UNSUPPORTED);
    CHECK(kvt::contains(st.message(), backend == "cuda" ? "not K as f16 and V as f32"
                                                        : "plugin ABI 1.0, which has one"));
    CHECK(kvt::contains(st.message(), "f32"));
    CHECK(raw == nullptr);
    return;
  }
  for (const Scenario& s : kMixed) run_schedule(s);
}

TEST_CASE("attention: quantized K and V match the reference over their dequantized rows") {
  // The cuda backend has no kernels for formats with scales yet: it refuses such a cache when
  // it is created, naming the format.
  const std::string backend = kvt::test_backend() ? kvt::test_backend() : "";
  if (backend == "cuda") {
    kvt::ContextPtr ctx = kvt::make_context();
    kvc_cache_params p;
    kvc_cache_params_init(&p);
    p.head_dim = 64;
    p.dtype = Q8;
    p.backend = backend.c_str();
    kvc_cache* raw = nullptr;
    kvt::Status st{kvc_cache_create(ctx.get(), &p, &raw)};
    CHECK(st.code() == KVC_ERR_UNSUPPORTED);
    CHECK(kvt::contains(st.message(), "q8_0"));
    CHECK(raw == nullptr);
    return;
  }
  // A backend built against plugin ABI 1.0 has one format for K and V (see above).
  for (const Scenario& s : kQuantized) {
    if (backend == "counting_1_0" && s.v_storage >= 0) continue;
    run_schedule(s);
  }
}

TEST_CASE("attention: row strides larger than a row") {
  for (const Scenario& s : kStrides) run_schedule(s);
}

TEST_CASE("attention: layers are stored independently and may hold different lengths") {
  // 3 layers with different data and lengths; a mix-up between layers changes outputs.
  const int L = 3, KVH = 2, QH = 4, D = 16;
  kvt::ContextPtr ctx = kvt::make_context();
  for (kvc_layout layout : {PAGED, CONTIG}) {
    INFO("layout " << layout);
    kvc_cache_params p;
    kvc_cache_params_init(&p);
    p.layers = L;
    p.kv_heads = KVH;
    p.q_heads = QH;
    p.head_dim = D;
    p.dtype = F32;
    p.layout = layout;
    p.block_tokens = 4;
    kvt::CachePtr cache = kvt::make_cache(ctx.get(), p);
    KVT_REQUIRE_OK(kvc_seq_create(cache.get(), 0));
    ref::Rng rng(99);
    std::vector<ref::History> hist(L, ref::History(KVH, D));
    const int lengths[L] = {10, 3, 7};
    for (int layer = 0; layer < L; ++layer) {
      const int n = lengths[layer];
      std::vector<int32_t> pos(n);
      for (int i = 0; i < n; ++i) pos[i] = i;
      const int32_t seq = 0;
      kvc_batch b;
      kvc_batch_init(&b, 1, &seq, &n, pos.data());
      std::vector<float> k = rng.vec(n * KVH * D), v = rng.vec(n * KVH * D);
      const kvc_tensor kt = kvt::tensor(k.data(), F32), vt = kvt::tensor(v.data(), F32);
      KVT_REQUIRE_OK(kvc_append(cache.get(), layer, &b, &kt, &vt));
      for (int i = 0; i < n; ++i) hist[layer].append(i, &k[i * KVH * D], &v[i * KVH * D]);
    }
    for (int layer = 0; layer < L; ++layer)
      for (int h = 0; h < KVH; ++h) CHECK(kvt::seq_length(cache.get(), 0, layer, h) == lengths[layer]);
    const kvc_cache_stats st = kvt::get_stats(cache.get());
    CHECK(st.tokens_stored == static_cast<uint64_t>((10 + 3 + 7) * KVH));

    // A query at position 20 on each layer sees exactly that layer's tokens.
    for (int layer = 0; layer < L; ++layer) {
      const int32_t seq = 0, one = 1, pos = 20;
      kvc_batch b;
      kvc_batch_init(&b, 1, &seq, &one, &pos);
      std::vector<float> q = rng.vec(QH * D), out(QH * D, -99.0f);
      const kvc_tensor qt = kvt::tensor(q.data(), F32);
      kvc_tensor_mut ot = kvt::tensor_mut(out.data());
      kvc_attention_params ap;
      kvc_attention_params_init(&ap);
      KVT_REQUIRE_OK(kvc_attend(cache.get(), layer, &b, &qt, &ap, &ot));
      std::vector<double> expect(QH * D);
      ref::attend(hist[layer], QH, q.data(), pos, ref::Options{}, expect.data());
      double err = 0;
      for (int i = 0; i < QH * D; ++i) err = std::max(err, std::fabs(out[i] - expect[i]));
      INFO("layer " << layer);
      CHECK(err <= 1e-5);
    }
  }
}

TEST_CASE("attention: appends of many MiB store every head's rows exactly as given") {
  // Calls that store over 4 MiB take the CPU backend's streaming path, which copies the heads
  // of a token side by side; sequences start at different fills, so their jobs split at
  // different block boundaries. Source rows are f16 with padding, then f32 (converted).
  const int kHeads = 4, kDim = 64, kSeqs = 8, kChunk = 640;
  const size_t row = static_cast<size_t>(kHeads) * kDim, pad = 8;
  kvt::ContextPtr ctx = kvt::make_context();
  for (kvc_layout layout : {PAGED, CONTIG}) {
    INFO("layout " << layout);
    kvc_cache_params p;
    kvc_cache_params_init(&p);
    p.layers = 1;
    p.kv_heads = kHeads;
    p.q_heads = kHeads;
    p.head_dim = kDim;
    p.dtype = F16;
    p.layout = layout;
    p.block_tokens = 16;
    p.memory_limit = size_t{256} << 20;
    kvt::CachePtr cache = kvt::make_cache(ctx.get(), p);
    ref::Rng rng(7);
    std::vector<int32_t> seqs(kSeqs), lengths(kSeqs, 0);
    std::vector<std::vector<uint16_t>> k_rows(kSeqs), v_rows(kSeqs);  // as stored: [tokens][row]
    for (int32_t s = 0; s < kSeqs; ++s) {
      seqs[s] = s;
      KVT_REQUIRE_OK(kvc_seq_create(cache.get(), s));
      const int32_t lead = 3 * s;  // a few tokens first, through the small-call path
      if (lead == 0) continue;
      std::vector<float> k = rng.vec(lead * row), v = rng.vec(lead * row);
      std::vector<int32_t> pos(static_cast<size_t>(lead));
      for (int32_t i = 0; i < lead; ++i) pos[i] = i;
      kvc_batch b;
      kvc_batch_init(&b, 1, &s, &lead, pos.data());
      const kvc_tensor kt = kvt::tensor(k.data(), F32), vt = kvt::tensor(v.data(), F32);
      KVT_REQUIRE_OK(kvc_append(cache.get(), 0, &b, &kt, &vt));
      for (float x : k) k_rows[s].push_back(kvc_f32_to_f16(x));
      for (float x : v) v_rows[s].push_back(kvc_f32_to_f16(x));
      lengths[s] = lead;
    }
    for (kvc_dtype source : {F16, F32}) {
      INFO("source " << dtype_name(source));
      const size_t stride = source == F16 ? row + pad : row;
      const size_t tokens = static_cast<size_t>(kSeqs) * kChunk;
      std::vector<float> k = rng.vec(tokens * stride), v = rng.vec(tokens * stride);
      std::vector<uint16_t> k16(k.size()), v16(v.size());
      for (size_t i = 0; i < k.size(); ++i) k16[i] = kvc_f32_to_f16(k[i]);
      for (size_t i = 0; i < v.size(); ++i) v16[i] = kvc_f32_to_f16(v[i]);
      std::vector<int32_t> pos;
      for (int32_t s = 0; s < kSeqs; ++s)
        for (int32_t i = 0; i < kChunk; ++i) pos.push_back(lengths[s] + i);
      const std::vector<int32_t> n_tokens(kSeqs, kChunk);
      kvc_batch b;
      kvc_batch_init(&b, kSeqs, seqs.data(), n_tokens.data(), pos.data());
      const kvc_tensor kt = source == F16 ? kvt::tensor(k16.data(), F16, stride)
                                          : kvt::tensor(k.data(), F32, stride);
      const kvc_tensor vt = source == F16 ? kvt::tensor(v16.data(), F16, stride)
                                          : kvt::tensor(v.data(), F32, stride);
      KVT_REQUIRE_OK(kvc_append(cache.get(), 0, &b, &kt, &vt));
      for (size_t t = 0; t < tokens; ++t) {
        const size_t s = t / kChunk;
        k_rows[s].insert(k_rows[s].end(), &k16[t * stride], &k16[t * stride] + row);
        v_rows[s].insert(v_rows[s].end(), &v16[t * stride], &v16[t * stride] + row);
      }
      for (int32_t s = 0; s < kSeqs; ++s) lengths[s] += kChunk;
    }
    for (int32_t s = 0; s < kSeqs; ++s) {
      const kvc::SequenceImage stored = kvt::stored_sequence(cache.get(), s);
      for (int32_t h = 0; h < kHeads; ++h) {
        INFO("sequence " << s << " head " << h);
        const kvc::HeadImage& got = stored.heads[static_cast<size_t>(h)];
        REQUIRE(got.positions.size() == static_cast<size_t>(lengths[s]));
        std::vector<uint16_t> k_want, v_want;
        for (size_t t = 0; t < got.positions.size(); ++t) {
          CHECK(got.positions[t] == static_cast<int32_t>(t));
          const size_t first = t * row + static_cast<size_t>(h) * kDim;
          k_want.insert(k_want.end(), &k_rows[s][first], &k_rows[s][first] + kDim);
          v_want.insert(v_want.end(), &v_rows[s][first], &v_rows[s][first] + kDim);
        }
        REQUIRE(got.k.size() == k_want.size() * sizeof(uint16_t));
        REQUIRE(got.v.size() == got.k.size());
        CHECK(std::memcmp(got.k.data(), k_want.data(), got.k.size()) == 0);
        CHECK(std::memcmp(got.v.data(), v_want.data(), got.v.size()) == 0);
      }
    }
  }
}

TEST_CASE("attention: a query that sees no key gets zeros") {
  kvt::ContextPtr ctx = kvt::make_context();
  for (kvc_layout layout : {PAGED, CONTIG}) {
    INFO("layout " << layout);
    kvc_cache_params p;
    kvc_cache_params_init(&p);
    p.kv_heads = 2;
    p.q_heads = 4;
    p.head_dim = 8;
    p.dtype = F32;
    p.layout = layout;
    kvt::CachePtr cache = kvt::make_cache(ctx.get(), p);
    KVT_REQUIRE_OK(kvc_seq_create(cache.get(), 5));
    KVT_REQUIRE_OK(kvc_seq_create(cache.get(), 6));  // stays empty
    // Tokens at positions 10..14.
    const int32_t seq = 5, n = 5;
    const int32_t pos[n] = {10, 11, 12, 13, 14};
    kvc_batch b;
    kvc_batch_init(&b, 1, &seq, &n, pos);
    ref::Rng rng(7);
    std::vector<float> k = rng.vec(n * 16), v = rng.vec(n * 16);
    const kvc_tensor kt = kvt::tensor(k.data(), F32), vt = kvt::tensor(v.data(), F32);
    KVT_REQUIRE_OK(kvc_append(cache.get(), 0, &b, &kt, &vt));

    // seq 5 at position 3 (before every key), seq 5 at 100 with window 4 (after every key),
    // the empty seq 6 at 0, and seq 5 at 12 (sees 10..12 only).
    std::vector<float> q = rng.vec(4 * 32);
    const kvc_tensor qt = kvt::tensor(q.data(), F32);
    kvc_attention_params ap;
    kvc_attention_params_init(&ap);
    {
      const int32_t s = 5, one = 1, p3 = 3;
      kvc_batch qb;
      kvc_batch_init(&qb, 1, &s, &one, &p3);
      std::vector<float> out(32, 5.0f);
      kvc_tensor_mut ot = kvt::tensor_mut(out.data());
      KVT_REQUIRE_OK(kvc_attend(cache.get(), 0, &qb, &qt, &ap, &ot));
      for (float x : out) CHECK(x == 0.0f);
    }
    {
      const int32_t s = 5, one = 1, p100 = 100;
      kvc_batch qb;
      kvc_batch_init(&qb, 1, &s, &one, &p100);
      std::vector<float> out(32, 5.0f);
      kvc_tensor_mut ot = kvt::tensor_mut(out.data());
      kvc_attention_params wp = ap;
      wp.sliding_window = 4;
      KVT_REQUIRE_OK(kvc_attend(cache.get(), 0, &qb, &qt, &wp, &ot));
      for (float x : out) CHECK(x == 0.0f);
    }
    {
      const int32_t s = 6, one = 1, p0 = 0;
      kvc_batch qb;
      kvc_batch_init(&qb, 1, &s, &one, &p0);
      std::vector<float> out(32, 5.0f);
      kvc_tensor_mut ot = kvt::tensor_mut(out.data());
      KVT_REQUIRE_OK(kvc_attend(cache.get(), 0, &qb, &qt, &ap, &ot));
      for (float x : out) CHECK(x == 0.0f);
    }
    {
      // position 12 sees keys 10, 11, 12 only
      const int32_t s = 5, one = 1, p12 = 12;
      kvc_batch qb;
      kvc_batch_init(&qb, 1, &s, &one, &p12);
      std::vector<float> out(32, 5.0f);
      kvc_tensor_mut ot = kvt::tensor_mut(out.data());
      KVT_REQUIRE_OK(kvc_attend(cache.get(), 0, &qb, &qt, &ap, &ot));
      ref::History h(2, 8);
      for (int i = 0; i < n; ++i) h.append(pos[i], &k[i * 16], &v[i * 16]);
      std::vector<double> expect(32);
      ref::attend(h, 4, q.data(), 12, ref::Options{}, expect.data());
      for (int i = 0; i < 32; ++i) CHECK(std::fabs(out[i] - expect[i]) <= 1e-5);
    }
  }
}

TEST_CASE("attention: concurrent calls on disjoint sequences of one cache") {
  const int T = 4, QH = 8, KVH = 2, D = 32, STEPS = 12;
  kvt::ContextPtr ctx = kvt::make_context();
  kvc_cache_params p;
  kvc_cache_params_init(&p);
  p.layers = 2;
  p.kv_heads = KVH;
  p.q_heads = QH;
  p.head_dim = D;
  p.dtype = F32;
  p.block_tokens = 4;
  kvt::CachePtr cache = kvt::make_cache(ctx.get(), p);
  for (int t = 0; t < T; ++t) KVT_REQUIRE_OK(kvc_seq_create(cache.get(), t));

  std::vector<double> worst(T, 0.0);
  std::vector<std::string> errors(T);
  std::vector<std::thread> threads;
  for (int t = 0; t < T; ++t) {
    threads.emplace_back([&, t]() {
      ref::Rng rng(1000 + t);
      std::vector<ref::History> hist(2, ref::History(KVH, D));
      int32_t next = 0;
      for (int s = 0; s < STEPS && errors[t].empty(); ++s) {
        const int32_t n = s == 0 ? 9 : (s % 4 == 0 ? 5 : 1);
        std::vector<int32_t> pos(n);
        for (int i = 0; i < n; ++i) pos[i] = next + i;
        kvc_batch b;
        kvc_batch_init(&b, 1, &t, &n, pos.data());
        for (int layer = 0; layer < 2; ++layer) {
          std::vector<float> k = rng.vec(n * KVH * D), v = rng.vec(n * KVH * D);
          std::vector<float> q = rng.vec(n * QH * D), out(n * QH * D);
          const kvc_tensor kt = kvt::tensor(k.data(), F32), vt = kvt::tensor(v.data(), F32);
          const kvc_tensor qt = kvt::tensor(q.data(), F32);
          kvc_tensor_mut ot = kvt::tensor_mut(out.data());
          kvc_attention_params ap;
          kvc_attention_params_init(&ap);
          kvt::Status st{kvc_append_attend(cache.get(), layer, &b, &qt, &kt, &vt, &ap, &ot)};
          if (!st.ok()) {
            errors[t] = st.describe();
            break;
          }
          for (int i = 0; i < n; ++i) hist[layer].append(pos[i], &k[i * KVH * D], &v[i * KVH * D]);
          std::vector<double> expect(QH * D);
          for (int i = 0; i < n; ++i) {
            ref::attend(hist[layer], QH, &q[i * QH * D], pos[i], ref::Options{}, expect.data());
            for (int e = 0; e < QH * D; ++e)
              worst[t] = std::max(worst[t], static_cast<double>(std::fabs(out[i * QH * D + e] - expect[e])));
          }
        }
        next += n;
      }
    });
  }
  for (std::thread& th : threads) th.join();
  for (int t = 0; t < T; ++t) {
    INFO("thread " << t << ": " << errors[t]);
    CHECK(errors[t].empty());
    CHECK(worst[t] <= 1e-5);
  }
}
