// Demote before evict (policy.demote): heads that hold tokens in two formats, checked against
// a double-precision reference over the rows as stored, with the selection rule of
// docs/policies.md written out again here; failures that leave the cache as it was; fork and
// removal of mixed heads.
#include <algorithm>
#include <cmath>
#include <random>
#include <vector>

#include "kvcache/kvcache_format.h"
#include "demote_support.hpp"
#include "test_support.hpp"

namespace {

using dmt::arm_fault;
using dmt::random_rows;

constexpr int32_t kKvHeads = 2, kQHeads = 4, kDim = 64;
constexpr int32_t kSinks = 4, kRecent = 8, kBudget = 40;
constexpr double kKeep = 0.5;
constexpr int kFaultConvert = 7;  // the fault backend's entry number of convert

// One stored token of one KV head as the reference sees it: its rows as stored, decoded.
struct RefToken {
  int32_t pos;
  std::vector<float> k, v;
  bool demoted;
};

// Bytes one token takes: K row, V row and position.
size_t token_bytes(int k_format, int v_format) {
  return kvc_format_row_bytes(k_format, kDim) + kvc_format_row_bytes(v_format, kDim) + 4;
}

std::vector<float> through(int format, const std::vector<float>& values) {
  std::vector<unsigned char> row(kvc_format_row_bytes(format, values.size()));
  std::vector<float> out(values.size());
  REQUIRE(kvc_format_row_from_f32(format, values.data(), row.data(), values.size()));
  REQUIRE(kvc_format_row_to_f32(format, row.data(), out.data(), values.size()));
  return out;
}

// The reference of one sequence: per KV head its tokens in position order, stored in f16,
// demoted to `demoted_format`.
class Reference {
 public:
  explicit Reference(int demoted_format) : format_(demoted_format), heads_(kKvHeads) {}

  void append(int32_t pos, const std::vector<float>& k, const std::vector<float>& v) {
    for (int32_t h = 0; h < kKvHeads; ++h) {
      const auto row = [&](const std::vector<float>& x) {
        return through(KVC_DTYPE_F16, {x.begin() + h * kDim, x.begin() + (h + 1) * kDim});
      };
      heads_[static_cast<size_t>(h)].push_back(RefToken{pos, row(k), row(v), false});
    }
  }

  // The window policy scores tokens by position: keep the protected ones, then the newest
  // others in the cache's format within the keep share, then demote the next newest while
  // the bytes allow, and evict the rest; demoted tokens never come back.
  void compress() {
    const size_t keep_cost = token_bytes(KVC_DTYPE_F16, KVC_DTYPE_F16);
    const size_t demoted_cost = token_bytes(format_, format_);
    const size_t budget = static_cast<size_t>(kBudget) * keep_cost;
    const auto keep_share = static_cast<size_t>(kKeep * static_cast<double>(budget));
    for (std::vector<RefToken>& tokens : heads_) {
      size_t bytes = 0;
      for (const RefToken& t : tokens) bytes += t.demoted ? demoted_cost : keep_cost;
      if (bytes <= budget) continue;
      const size_t n = tokens.size();
      std::vector<int> fate(n, 0);  // 0 evict, 1 keep, 2 demote
      size_t spent = 0, kept = 0;
      for (size_t i = 0; i < n; ++i) {
        if (i >= static_cast<size_t>(kSinks) && i + kRecent < n) continue;
        fate[i] = tokens[i].demoted ? 2 : 1;
        spent += tokens[i].demoted ? demoted_cost : keep_cost;
        kept += tokens[i].demoted ? 0 : keep_cost;
      }
      for (size_t i = n - kRecent; i-- > static_cast<size_t>(kSinks);) {
        if (spent + demoted_cost > budget) break;
        if (!tokens[i].demoted && kept + keep_cost <= keep_share && spent + keep_cost <= budget) {
          fate[i] = 1;
          kept += keep_cost;
          spent += keep_cost;
        } else {
          fate[i] = 2;
          spent += demoted_cost;
        }
      }
      std::vector<RefToken> left;
      for (size_t i = 0; i < n; ++i) {
        if (fate[i] == 0) continue;
        RefToken t = tokens[i];
        if (fate[i] == 2 && !t.demoted) {
          t.k = through(format_, t.k);
          t.v = through(format_, t.v);
          t.demoted = true;
        }
        left.push_back(std::move(t));
      }
      tokens = std::move(left);
    }
  }

  void remove(int32_t first, int32_t end) {
    for (std::vector<RefToken>& tokens : heads_) {
      tokens.erase(std::remove_if(tokens.begin(), tokens.end(),
                                  [&](const RefToken& t) { return t.pos >= first && t.pos < end; }),
                   tokens.end());
    }
  }

  size_t length(int32_t h) const { return heads_[static_cast<size_t>(h)].size(); }
  size_t demoted(int32_t h) const {
    size_t n = 0;
    for (const RefToken& t : heads_[static_cast<size_t>(h)]) n += t.demoted ? 1 : 0;
    return n;
  }

  // Attention of one query token (kQHeads x kDim) at `pos` in double. Keys of a format with
  // scales meet the scaled query rounded to that format's query format, as the kernels do.
  std::vector<double> attend(const std::vector<float>& q, int32_t pos) const {
    const double scale = 1.0 / std::sqrt(static_cast<double>(kDim));
    std::vector<double> out(q.size(), 0.0);
    for (int32_t qh = 0; qh < kQHeads; ++qh) {
      const std::vector<RefToken>& tokens = heads_[static_cast<size_t>(qh / (kQHeads / kKvHeads))];
      const std::vector<float> exact(q.begin() + qh * kDim, q.begin() + (qh + 1) * kDim);
      std::vector<float> scaled(exact);
      for (float& x : scaled) x *= static_cast<float>(scale);
      const std::vector<float> rounded = through(kvc_format_query_format(format_), scaled);
      std::vector<double> logits;
      double top = -INFINITY;
      for (const RefToken& t : tokens) {
        double dot = 0.0;
        for (int32_t i = 0; i < kDim; ++i) {
          dot += t.demoted ? double(rounded[size_t(i)]) * t.k[size_t(i)]
                           : double(exact[size_t(i)]) * t.k[size_t(i)] * scale;
        }
        logits.push_back(t.pos <= pos ? dot : -INFINITY);
        top = std::max(top, logits.back());
      }
      double sum = 0.0;
      for (size_t j = 0; j < tokens.size(); ++j) {
        const double w = std::exp(logits[j] - top);
        sum += w;
        for (int32_t i = 0; i < kDim; ++i) out[size_t(qh * kDim + i)] += w * tokens[j].v[size_t(i)];
      }
      for (int32_t i = 0; i < kDim; ++i) out[size_t(qh * kDim + i)] /= sum;
    }
    return out;
  }

 private:
  int format_;
  std::vector<std::vector<RefToken>> heads_;
};

kvc_cache_params demote_params(int demoted_format) {
  kvc_cache_params p;
  kvc_cache_params_init(&p);
  p.layers = 1;
  p.kv_heads = kKvHeads;
  p.q_heads = kQHeads;
  p.head_dim = kDim;
  p.dtype = KVC_DTYPE_F16;
  p.policy = "window";
  p.budget = kBudget;
  p.sinks = kSinks;
  p.recent = kRecent;
  p.demote_k_dtype = demoted_format;
  p.demote_v_dtype = demoted_format;
  p.demote_keep = kKeep;
  return p;
}

kvc_batch one_sequence(const int32_t& seq, const int32_t& n, const int32_t* positions) {
  kvc_batch batch;
  kvc_batch_init(&batch, 1, &seq, &n, positions);
  return batch;
}

// Appends tokens [first, first + n) of sequence `seq` to the cache and the reference.
void append(kvc_cache* cache, int32_t seq, Reference& ref, std::mt19937& rng, int32_t first,
            int32_t n) {
  std::vector<int32_t> positions(static_cast<size_t>(n));
  for (int32_t t = 0; t < n; ++t) positions[size_t(t)] = first + t;
  const size_t width = static_cast<size_t>(kKvHeads) * kDim;
  const std::vector<float> k = random_rows(rng, size_t(n) * width);
  const std::vector<float> v = random_rows(rng, size_t(n) * width);
  const kvc_batch batch = one_sequence(seq, n, positions.data());
  const kvc_tensor kt = kvt::tensor(k.data(), KVC_DTYPE_F32);
  const kvc_tensor vt = kvt::tensor(v.data(), KVC_DTYPE_F32);
  KVT_REQUIRE_OK(kvc_append(cache, 0, &batch, &kt, &vt));
  for (int32_t t = 0; t < n; ++t) {
    ref.append(first + t, {k.begin() + long(size_t(t) * width), k.begin() + long(size_t(t + 1) * width)},
               {v.begin() + long(size_t(t) * width), v.begin() + long(size_t(t + 1) * width)});
  }
}

// The attention of the query of the token at `pos` (already appended) over sequence `seq`.
std::vector<float> attend(kvc_cache* cache, int32_t seq, int32_t pos, const std::vector<float>& q,
                          kvc_status** status = nullptr) {
  const int32_t n = 1;
  const kvc_batch batch = one_sequence(seq, n, &pos);
  std::vector<float> out(q.size(), NAN);
  const kvc_tensor qt = kvt::tensor(q.data(), KVC_DTYPE_F32);
  kvc_tensor_mut ot = kvt::tensor_mut(out.data());
  kvc_status* st = kvc_attend(cache, 0, &batch, &qt, nullptr, &ot);
  if (status) {
    *status = st;
  } else {
    KVT_REQUIRE_OK(st);
  }
  return out;
}

double max_error(const std::vector<float>& got, const std::vector<double>& expected) {
  double worst = 0.0;
  for (size_t i = 0; i < got.size(); ++i) {
    worst = std::max(worst, std::isnan(got[i]) ? INFINITY : std::fabs(got[i] - expected[i]));
  }
  return worst;
}

// Appends a probe token at `pos` and checks its attention against the reference.
void probe(kvc_cache* cache, int32_t seq, Reference& ref, std::mt19937& rng, int32_t pos) {
  append(cache, seq, ref, rng, pos, 1);
  const std::vector<float> q = random_rows(rng, size_t(kQHeads) * kDim);
  CHECK(max_error(attend(cache, seq, pos, q), ref.attend(q, pos)) < 1e-4);
}

void check_lengths(const kvc_cache* cache, int32_t seq, const Reference& ref) {
  for (int32_t h = 0; h < kKvHeads; ++h) {
    CHECK(static_cast<size_t>(kvt::seq_length(cache, seq, 0, h)) == ref.length(h));
  }
}

void compress(kvc_cache* cache, int32_t seq) { KVT_REQUIRE_OK(kvc_compress(cache, -1, 1, &seq)); }

// Equal but for the high-water marks a failed call may raise (bytes_peak, and bytes_reserved:
// blocks taken from the backend stay pooled).
bool same_stats(kvc_cache_stats a, kvc_cache_stats b) {
  a.bytes_peak = b.bytes_peak = a.bytes_reserved = b.bytes_reserved = 0;
  return kvt::stats_equal(a, b);
}


}  // namespace

TEST_CASE("demote: heads with a demoted tier attend as the reference over their rows as stored") {
  kvt::ContextPtr ctx = kvt::make_context();
  for (int format : {KVC_DTYPE_Q4_0, KVC_DTYPE_Q8_0}) {
    CAPTURE(kvc_format_name(format));
    kvt::CachePtr cache = kvt::make_cache(ctx.get(), demote_params(format));
    KVT_REQUIRE_OK(kvc_seq_create(cache.get(), 0));
    Reference ref(format);
    std::mt19937 rng(11);
    append(cache.get(), 0, ref, rng, 0, 100);
    compress(cache.get(), 0);
    ref.compress();
    check_lengths(cache.get(), 0, ref);
    CHECK(ref.demoted(0) > 0);
    CHECK(ref.length(0) < 100);
    kvc_cache_stats stats = kvt::get_stats(cache.get());
    CHECK(stats.tokens_demoted == ref.demoted(0) + ref.demoted(1));
    CHECK(stats.tokens_evicted == 200 - ref.length(0) - ref.length(1));
    probe(cache.get(), 0, ref, rng, 100);
    // A second compression of mixed heads: its demoted tokens stay or go, never come back.
    append(cache.get(), 0, ref, rng, 101, 60);
    compress(cache.get(), 0);
    ref.compress();
    check_lengths(cache.get(), 0, ref);
    probe(cache.get(), 0, ref, rng, 161);
    stats = kvt::get_stats(cache.get());
    CHECK(stats.tokens_stored == ref.length(0) + ref.length(1));
  }
}

TEST_CASE("demote: the budget counts bytes, and the demoted tier's blocks hold more tokens") {
  kvt::ContextPtr ctx = kvt::make_context();
  kvc_cache_params p = demote_params(KVC_DTYPE_Q4_0);
  kvt::CachePtr cache = kvt::make_cache(ctx.get(), p);
  KVT_REQUIRE_OK(kvc_seq_create(cache.get(), 0));
  Reference ref(KVC_DTYPE_Q4_0);
  std::mt19937 rng(3);
  append(cache.get(), 0, ref, rng, 0, 200);
  compress(cache.get(), 0);
  ref.compress();
  const size_t keep_cost = token_bytes(KVC_DTYPE_F16, KVC_DTYPE_F16);
  const size_t demoted_cost = token_bytes(KVC_DTYPE_Q4_0, KVC_DTYPE_Q4_0);
  const size_t block_bytes = 16 * keep_cost;  // f16 rows and positions pack without padding
  const size_t demoted_per_block = block_bytes / demoted_cost;
  size_t blocks = 0;
  for (int32_t h = 0; h < kKvHeads; ++h) {
    const size_t demoted = ref.demoted(h), kept = ref.length(h) - demoted;
    CHECK(kept * keep_cost + demoted * demoted_cost <= size_t(kBudget) * keep_cost);
    CHECK(ref.length(h) > size_t(kBudget));  // more tokens than evict-only keeps
    blocks += (demoted + demoted_per_block - 1) / demoted_per_block + (kept + 15) / 16;
  }
  const kvc_cache_stats stats = kvt::get_stats(cache.get());
  CHECK(stats.blocks_used == blocks);
  CHECK(stats.bytes_used == blocks * block_bytes);
}

TEST_CASE("demote: a fork shares the mixed heads; removing a range keeps each tier's rows") {
  kvt::ContextPtr ctx = kvt::make_context();
  kvt::CachePtr cache = kvt::make_cache(ctx.get(), demote_params(KVC_DTYPE_Q4_0));
  KVT_REQUIRE_OK(kvc_seq_create(cache.get(), 0));
  Reference ref(KVC_DTYPE_Q4_0);
  std::mt19937 rng(7);
  append(cache.get(), 0, ref, rng, 0, 120);
  compress(cache.get(), 0);
  ref.compress();
  KVT_REQUIRE_OK(kvc_seq_fork(cache.get(), 0, 1));
  CHECK(kvt::get_stats(cache.get()).bytes_shared > 0);
  Reference fork = ref;
  // The same probe on both: equal to each other and to the reference.
  std::mt19937 same(1);
  std::mt19937 same_again(1);
  probe(cache.get(), 0, ref, same, 120);
  probe(cache.get(), 1, fork, same_again, 120);
  // Positions 40..70 lie in the demoted tier, 110..115 in the kept recent ones.
  KVT_REQUIRE_OK(kvc_seq_remove_range(cache.get(), 1, 40, 70));
  fork.remove(40, 70);
  KVT_REQUIRE_OK(kvc_seq_remove_range(cache.get(), 1, 110, 115));
  fork.remove(110, 115);
  check_lengths(cache.get(), 1, fork);
  check_lengths(cache.get(), 0, ref);
  probe(cache.get(), 1, fork, rng, 121);
  probe(cache.get(), 0, ref, rng, 121);
  KVT_REQUIRE_OK(kvc_seq_truncate(cache.get(), 1, 100));
  fork.remove(100, 1 << 30);
  check_lengths(cache.get(), 1, fork);
  probe(cache.get(), 1, fork, rng, 100);
}

TEST_CASE("demote: a failed demotion leaves the cache as it was") {
  kvt::ContextPtr ctx = kvt::make_context();
  KVT_REQUIRE_OK(kvc_context_load_plugin(ctx.get(), KVC_TEST_FAULT_PLUGIN));
  kvc_cache_params p = demote_params(KVC_DTYPE_Q4_0);
  p.backend = "fault";
  arm_fault(-1, 0);
  kvt::CachePtr cache = kvt::make_cache(ctx.get(), p);
  KVT_REQUIRE_OK(kvc_seq_create(cache.get(), 0));
  Reference ref(KVC_DTYPE_Q4_0);
  std::mt19937 rng(5);
  append(cache.get(), 0, ref, rng, 0, 100);
  const auto exported = [&] { return dmt::exported(cache.get(), 0); };
  const std::vector<unsigned char> before = exported();
  const kvc_cache_stats stats_before = kvt::get_stats(cache.get());
  // The backend's conversion fails, then every later backend call of the compression in turn.
  for (int entry : {kFaultConvert, 0}) {
    arm_fault(entry, 1);
    const int32_t seq = 0;
    kvt::Status st{kvc_compress(cache.get(), -1, 1, &seq)};
    arm_fault(-1, 0);
    CHECK(st.code() == KVC_ERR_PLUGIN);
    CHECK(exported() == before);
    CHECK(same_stats(kvt::get_stats(cache.get()), stats_before));
  }
  // A mixed head whose next demotion fails attends exactly as before.
  compress(cache.get(), 0);
  ref.compress();
  append(cache.get(), 0, ref, rng, 100, 50);
  append(cache.get(), 0, ref, rng, 150, 1);
  const std::vector<float> q = random_rows(rng, size_t(kQHeads) * kDim);
  const std::vector<float> out = attend(cache.get(), 0, 150, q);
  CHECK(max_error(out, ref.attend(q, 150)) < 1e-4);
  const kvc_cache_stats mixed = kvt::get_stats(cache.get());
  arm_fault(kFaultConvert, 1);
  const int32_t seq = 0;
  kvt::Status st{kvc_compress(cache.get(), -1, 1, &seq)};
  arm_fault(-1, 0);
  CHECK(st.code() == KVC_ERR_PLUGIN);
  CHECK(attend(cache.get(), 0, 150, q) == out);
  CHECK(same_stats(kvt::get_stats(cache.get()), mixed));
  check_lengths(cache.get(), 0, ref);
}

TEST_CASE("demote: out of memory for the rewritten heads leaves the cache as it was") {
  kvt::ContextPtr ctx = kvt::make_context();
  kvc_cache_params p = demote_params(KVC_DTYPE_Q4_0);
  const size_t block_bytes = 16 * token_bytes(KVC_DTYPE_F16, KVC_DTYPE_F16);
  p.memory_limit = 7 * kKvHeads * block_bytes;  // 100 tokens fill 7 blocks a head
  kvt::CachePtr cache = kvt::make_cache(ctx.get(), p);
  KVT_REQUIRE_OK(kvc_seq_create(cache.get(), 0));
  Reference ref(KVC_DTYPE_Q4_0);
  std::mt19937 rng(9);
  append(cache.get(), 0, ref, rng, 0, 100);
  append(cache.get(), 0, ref, rng, 100, 1);
  const std::vector<float> q = random_rows(rng, size_t(kQHeads) * kDim);
  const std::vector<float> out = attend(cache.get(), 0, 100, q);
  const kvc_cache_stats before = kvt::get_stats(cache.get());
  const int32_t seq = 0;
  kvt::Status st{kvc_compress(cache.get(), -1, 1, &seq)};
  CHECK(st.code() == KVC_ERR_OUT_OF_MEMORY);
  CHECK(attend(cache.get(), 0, 100, q) == out);
  CHECK(same_stats(kvt::get_stats(cache.get()), before));
  check_lengths(cache.get(), 0, ref);
}

TEST_CASE("demote: caches that cannot demote are refused, and views of mixed heads too") {
  kvt::ContextPtr ctx = kvt::make_context();
  kvc_cache* raw = nullptr;
  kvc_cache_params p = demote_params(KVC_DTYPE_Q4_0);
  p.layout = KVC_LAYOUT_CONTIGUOUS;
  kvt::Status contiguous{kvc_cache_create(ctx.get(), &p, &raw)};
  CHECK(contiguous.code() == KVC_ERR_INVALID_ARGUMENT);
  CHECK(kvt::contains(contiguous.message(), "paged layout"));
  p = demote_params(KVC_DTYPE_F16);
  kvt::Status same{kvc_cache_create(ctx.get(), &p, &raw)};
  CHECK(same.code() == KVC_ERR_INVALID_ARGUMENT);
  CHECK(kvt::contains(same.message(), "no fewer than the cache's formats"));
  CHECK(raw == nullptr);

  kvt::CachePtr cache = kvt::make_cache(ctx.get(), demote_params(KVC_DTYPE_Q4_0));
  KVT_REQUIRE_OK(kvc_seq_create(cache.get(), 0));
  Reference ref(KVC_DTYPE_Q4_0);
  std::mt19937 rng(2);
  append(cache.get(), 0, ref, rng, 0, 100);
  compress(cache.get(), 0);
  size_t count = 0;
  kvt::Status view{kvc_seq_view(cache.get(), 0, 0, 0, nullptr, 0, &count)};
  CHECK(view.code() == KVC_ERR_UNSUPPORTED);
  CHECK(kvt::contains(view.message(), "demoted"));
}
