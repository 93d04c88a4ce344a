// Every fallible call (store calls included, through a host store), with each backend call it
// makes failed in turn (the fault backend of tests/plugins/fault_backend.c): the call reports
// the error and leaves the statistics, the lengths and every stored position, K and V as they
// were; retried, it then gives what a cache that never failed gives.
#include <dlfcn.h>

#include <cmath>
#include <functional>
#include <map>
#include <numeric>

#include "test_support.hpp"

namespace {

constexpr int32_t kLayers = 2, kKvHeads = 2, kQHeads = 4, kDim = 8;
// The store the store calls use, and the value check_faults() puts there for a restore.
const char* const kStoresYaml = "stores:\n  host: { plugin: host }\n";
const char* const kSeedKey = "faults-seed";
constexpr int kEntries = 8;  // copy, append, attend, compact, read_keys, read_tokens, alloc, convert
const char* const kEntryNames[kEntries] = {"copy",      "append",      "attend", "compact",
                                           "read_keys", "read_tokens", "alloc",  "convert"};

void arm(int entry, long nth) {
  void* handle = dlopen(KVC_TEST_FAULT_PLUGIN, RTLD_NOW | RTLD_NOLOAD);
  REQUIRE(handle != nullptr);
  auto fn =
      reinterpret_cast<void (*)(int, long, int32_t, const char*)>(dlsym(handle, "kvc_fault_arm"));
  const bool found = fn != nullptr;
  REQUIRE(found);
  fn(entry, nth, KVC_ERR_PLUGIN, "injected fault");
  dlclose(handle);
}

bool fired() {
  void* handle = dlopen(KVC_TEST_FAULT_PLUGIN, RTLD_NOW | RTLD_NOLOAD);
  REQUIRE(handle != nullptr);
  auto fn = reinterpret_cast<int (*)()>(dlsym(handle, "kvc_fault_fired"));
  const bool found = fn != nullptr;
  REQUIRE(found);
  const bool result = fn() != 0;
  dlclose(handle);
  return result;
}

// Everything a caller can observe of a cache, but the high-water marks a failed call may
// raise: bytes_peak, and bytes_reserved (blocks taken from the backend stay pooled).
struct Snapshot {
  kvc_cache_stats stats{};
  std::map<int32_t, std::vector<std::vector<float>>> heads;  // seq -> [layer * heads + head]
  std::map<int32_t, std::vector<unsigned char>> exported;    // seq -> kvc_seq_export()

  bool operator==(const Snapshot& o) const {
    kvc_cache_stats a = stats, b = o.stats;
    a.bytes_peak = b.bytes_peak = a.bytes_reserved = b.bytes_reserved = 0;
    return kvt::stats_equal(a, b) && heads == o.heads && exported == o.exported;
  }
  // The same tokens, however much memory holds them.
  bool same_tokens(const Snapshot& o) const {
    return heads == o.heads && exported == o.exported && stats.tokens_stored == o.stats.tokens_stored &&
           stats.tokens_evicted == o.stats.tokens_evicted && stats.sequences == o.stats.sequences;
  }
};

// Length, then each token's position, K and V; only the length for a head with a demoted tier,
// which has no view (the export holds its rows).
std::vector<float> head_contents(kvc_cache* cache, int32_t seq, int32_t layer, int32_t head) {
  std::vector<float> out{static_cast<float>(kvt::seq_length(cache, seq, layer, head))};
  size_t count = 0;
  kvt::Status viewed{kvc_seq_view(cache, seq, layer, head, nullptr, 0, &count)};
  if (viewed.code() == KVC_ERR_UNSUPPORTED) return out;
  REQUIRE(viewed.ok());
  std::vector<kvc_segment_view> views(count);
  KVT_REQUIRE_OK(kvc_seq_view(cache, seq, layer, head, views.data(), count, &count));
  for (const kvc_segment_view& v : views) {
    const auto* k = static_cast<const float*>(v.k);
    const auto* val = static_cast<const float*>(v.v);
    for (int32_t t = 0; t < v.count; ++t) {
      out.push_back(static_cast<float>(v.pos[t]));
      out.insert(out.end(), k + t * kDim, k + (t + 1) * kDim);
      out.insert(out.end(), val + t * kDim, val + (t + 1) * kDim);
    }
  }
  return out;
}

Snapshot snapshot(kvc_cache* cache) {
  Snapshot s;
  s.stats = kvt::get_stats(cache);
  for (int32_t seq = 0; seq < 8; ++seq) {
    int32_t n = 0;
    kvt::Status st{kvc_seq_length(cache, seq, 0, 0, &n)};
    if (!st.ok()) continue;
    for (int32_t layer = 0; layer < kLayers; ++layer) {
      for (int32_t h = 0; h < kKvHeads; ++h)
        s.heads[seq].push_back(head_contents(cache, seq, layer, h));
    }
    // Besides K, V and positions: the statistics and compression counters.
    size_t size = 0, written = 0;
    KVT_REQUIRE_OK(kvc_seq_export_size(cache, seq, &size));
    std::vector<unsigned char>& bytes = s.exported[seq];
    bytes.resize(size);
    KVT_REQUIRE_OK(kvc_seq_export(cache, seq, bytes.data(), size, &written));
    bytes.resize(written);
  }
  return s;
}

std::vector<float> rows(int32_t tokens, int32_t heads, float seed) {
  std::vector<float> out(static_cast<size_t>(tokens) * heads * kDim);
  for (size_t i = 0; i < out.size(); ++i) out[i] = std::sin(seed + 0.37f * static_cast<float>(i));
  return out;
}

// Appends and attends `n` tokens per sequence at positions from `first` on.
kvc_status* step(kvc_cache* cache, int32_t layer, std::vector<int32_t> seqs, int32_t first,
                 int32_t n, bool append, bool attend, std::vector<float>* out = nullptr) {
  std::vector<int32_t> n_tokens(seqs.size(), n), positions;
  for (size_t s = 0; s < seqs.size(); ++s) {
    for (int32_t t = 0; t < n; ++t) positions.push_back(first + t);
  }
  const int32_t total = static_cast<int32_t>(positions.size());
  std::vector<float> k = rows(total, kKvHeads, static_cast<float>(first + layer));
  std::vector<float> v = rows(total, kKvHeads, static_cast<float>(first + layer) + 0.5f);
  std::vector<float> q = rows(total, kQHeads, static_cast<float>(first + layer) + 0.25f);
  std::vector<float> local(static_cast<size_t>(total) * kQHeads * kDim, -1.0f);
  std::vector<float>& o = out ? *out : local;
  o.assign(local.size(), -1.0f);
  kvc_batch batch;
  kvc_batch_init(&batch, static_cast<int32_t>(seqs.size()), seqs.data(), n_tokens.data(),
                 positions.data());
  kvc_tensor tk = kvt::tensor(k.data(), KVC_DTYPE_F32), tv = kvt::tensor(v.data(), KVC_DTYPE_F32);
  kvc_tensor tq = kvt::tensor(q.data(), KVC_DTYPE_F32);
  kvc_tensor_mut to = kvt::tensor_mut(o.data());
  kvc_attention_params params;
  kvc_attention_params_init(&params);
  if (append && attend) return kvc_append_attend(cache, layer, &batch, &tq, &tk, &tv, &params, &to);
  if (append) return kvc_append(cache, layer, &batch, &tk, &tv);
  return kvc_attend(cache, layer, &batch, &tq, &params, &to);
}

struct Setup {
  kvc_layout layout;
  const char* policy;  // NULL: none
  kvc_prefill_compression prefill;
  int32_t decode_every = 2;  // with a policy
  int32_t demote = -1;       // with a policy: the demoted format of K and V (-1: none)
};

// Sequences 0 and 1 with a 20-token prompt on every layer (attended, so that a "once"
// compression is pending), then sequence 2 forked from 0 (shared blocks).
kvt::CachePtr make(kvc_context* ctx, const Setup& setup) {
  kvc_cache_params p;
  kvc_cache_params_init(&p);
  p.layers = kLayers;
  p.kv_heads = kKvHeads;
  p.q_heads = kQHeads;
  p.head_dim = kDim;
  p.dtype = KVC_DTYPE_F32;
  p.layout = setup.layout;
  p.block_tokens = 4;
  p.memory_limit = size_t{1} << 20;
  p.backend = "fault";
  p.policy = setup.policy;
  p.budget = setup.policy ? 12 : 0;
  p.sinks = setup.policy ? 2 : -1;
  p.recent = setup.policy ? 4 : -1;
  p.prefill = setup.prefill;
  p.decode_every = setup.policy ? setup.decode_every : 0;
  p.demote_k_dtype = p.demote_v_dtype = setup.demote;
  kvt::CachePtr cache = kvt::make_cache(ctx, p);
  for (int32_t s : {0, 1}) KVT_REQUIRE_OK(kvc_seq_create(cache.get(), s));
  for (int32_t layer = 0; layer < kLayers; ++layer) {
    KVT_REQUIRE_OK(step(cache.get(), layer, {0, 1}, 0, 20, true, true));
  }
  KVT_REQUIRE_OK(kvc_seq_fork(cache.get(), 0, 2));
  return cache;
}

// A call under test; `result` receives what it returns besides the cache (out, bytes).
using Call = std::function<kvc_status*(kvc_cache*, std::vector<float>& result)>;

std::vector<std::pair<const char*, Call>> calls(const Setup& setup) {
  std::vector<std::pair<const char*, Call>> out;
  out.emplace_back("append (one token, the once compression)",
                   [](kvc_cache* c, std::vector<float>&) {
                     return step(c, 0, {0, 1}, 20, 1, true, false);
                   });
  out.emplace_back("append (a chunk that grows every store)",
                   [](kvc_cache* c, std::vector<float>&) {
                     return step(c, 1, {0, 1, 2}, 20, 30, true, false);
                   });
  out.emplace_back("attend", [](kvc_cache* c, std::vector<float>& r) {
    return step(c, 0, {0, 1}, 19, 1, false, true, &r);
  });
  out.emplace_back("append_attend (one token)", [](kvc_cache* c, std::vector<float>& r) {
    return step(c, 0, {0, 1, 2}, 20, 1, true, true, &r);
  });
  out.emplace_back("append_attend (a chunk)", [](kvc_cache* c, std::vector<float>& r) {
    return step(c, 1, {1, 2}, 20, 24, true, true, &r);
  });
  out.emplace_back("compress", [](kvc_cache* c, std::vector<float>&) {
    const int32_t seqs[] = {0, 1, 2};
    return kvc_compress(c, -1, 3, seqs);
  });
  if (setup.policy && setup.demote < 0) {  // a demoted tier has no view to report against
    out.emplace_back("report_stats", [setup](kvc_cache* c, std::vector<float>&) {
      const int32_t n = kvt::seq_length(c, 2, 1, 1);
      std::vector<float> values(static_cast<size_t>(n), 0.5f);
      const kvc_stat_kind kind =
          std::string(setup.policy) == "h2o" ? KVC_STAT_KIND_ATTN_SUM : KVC_STAT_KIND_ATTN_WINDOW;
      return kvc_report_stats(c, 2, 1, 1, kind, values.data(), n);
    });
  }
  out.emplace_back("reserve",
                   [](kvc_cache* c, std::vector<float>&) { return kvc_seq_reserve(c, 2, 70); });
  out.emplace_back("seq_fork",
                   [](kvc_cache* c, std::vector<float>&) { return kvc_seq_fork(c, 2, 5); });
  out.emplace_back("seq_truncate",
                   [](kvc_cache* c, std::vector<float>&) { return kvc_seq_truncate(c, 2, 5); });
  out.emplace_back("seq_remove_range", [](kvc_cache* c, std::vector<float>&) {
    return kvc_seq_remove_range(c, 0, 3, 9);
  });
  out.emplace_back("seq_export", [](kvc_cache* c, std::vector<float>& r) {
    size_t size = 0;
    if (kvc_status* st = kvc_seq_export_size(c, 2, &size)) return st;
    std::vector<unsigned char> bytes(size);
    size_t written = 0;
    kvc_status* st = kvc_seq_export(c, 2, bytes.data(), bytes.size(), &written);
    r.assign(bytes.begin(), bytes.begin() + static_cast<std::ptrdiff_t>(written));
    return st;
  });
  out.emplace_back("seq_import", [](kvc_cache* c, std::vector<float>&) {
    // The export that makes the bytes counts too: its failures must change nothing either.
    size_t size = 0, written = 0;
    if (kvc_status* st = kvc_seq_export_size(c, 0, &size)) return st;
    std::vector<unsigned char> bytes(size);
    if (kvc_status* st = kvc_seq_export(c, 0, bytes.data(), bytes.size(), &written)) return st;
    return kvc_seq_import(c, 6, bytes.data(), written);
  });
  out.emplace_back("seq_offload", [](kvc_cache* c, std::vector<float>&) {
    return kvc_seq_offload(c, 2, "host", "faults-offload");
  });
  out.emplace_back("seq_restore", [](kvc_cache* c, std::vector<float>&) {
    return kvc_seq_restore(c, 6, "host", kSeedKey);
  });
  if (setup.prefill != KVC_PREFILL_PER_CHUNK) {  // per_chunk compressed the prompt: no prefix
    out.emplace_back("prefix_save, prefix_load", [](kvc_cache* c, std::vector<float>& r) {
      std::vector<int32_t> ids(20);
      std::iota(ids.begin(), ids.end(), 100);
      kvc_prefix prefix;
      kvc_prefix_init(&prefix, "faults", ids.data(), 20);
      prefix.chunk_tokens = 4;
      int32_t saved = 0, restored = 0;
      if (kvc_status* st = kvc_prefix_save(c, 1, "host", &prefix, &saved)) return st;
      kvc_status* st = kvc_prefix_load(c, 6, "host", &prefix, &restored);
      r = {static_cast<float>(saved), static_cast<float>(restored)};
      return st;
    });
  }
  return out;
}

// Runs each call of `setup` that `selected` picks with every backend call failed in turn.
void check_faults(kvc_context* ctx, const Setup& setup,
                  const std::function<bool(const std::string&)>& selected) {
  CAPTURE(setup.layout);
  CAPTURE(setup.decode_every);
  CAPTURE(setup.demote);
  const std::string policy = setup.policy ? setup.policy : "none";
  CAPTURE(policy);
  {  // The value seq_restore restores: sequence 0 of this setup's cache.
    arm(-1, 0);
    kvt::CachePtr seed = make(ctx, setup);
    KVT_REQUIRE_OK(kvc_seq_offload(seed.get(), 0, "host", kSeedKey));
  }
  for (const auto& [name, call] : calls(setup)) {
    const std::string call_name = name;
    if (!selected(call_name)) continue;
    CAPTURE(call_name);
    arm(-1, 0);
    kvt::CachePtr reference = make(ctx, setup);
    std::vector<float> expected_result;
    KVT_REQUIRE_OK(call(reference.get(), expected_result));
    const Snapshot expected = snapshot(reference.get());
    reference.reset();
    for (int entry = 0; entry < kEntries; ++entry) {
      const std::string entry_name = kEntryNames[entry];
      CAPTURE(entry_name);
      arm(-1, 0);
      kvt::CachePtr cache = make(ctx, setup);
      Snapshot before = snapshot(cache.get());
      if (setup.demote >= 0) REQUIRE(before.stats.tokens_demoted > 0);  // mixed heads under test
      for (long nth = 1;; ++nth) {
        CAPTURE(nth);
        REQUIRE(nth < 1000);
        arm(entry, nth);
        std::vector<float> result;
        kvt::Status st{call(cache.get(), result)};
        const bool failed = fired();
        arm(-1, 0);
        if (st.ok()) {
          // Done, or the failed backend call had a fallback (an allocation retried smaller,
          // which stores the same tokens in other capacities).
          CHECK(result == expected_result);
          if (failed) {
            CHECK(snapshot(cache.get()).same_tokens(expected));
          } else {
            CHECK(snapshot(cache.get()) == expected);
          }
          if (!failed) break;
          cache = make(ctx, setup);
          before = snapshot(cache.get());
          continue;
        }
        INFO(st.describe());
        REQUIRE(failed);
        CHECK(!st.message().empty());
        const Snapshot after = snapshot(cache.get());
        INFO("before " << kvt::stats_string(before.stats) << " after "
                       << kvt::stats_string(after.stats));
        CHECK(after == before);
      }
    }
  }
}

const Setup kSetups[] = {
    {KVC_LAYOUT_PAGED, nullptr, KVC_PREFILL_NONE},
    {KVC_LAYOUT_CONTIGUOUS, nullptr, KVC_PREFILL_NONE},
    {KVC_LAYOUT_PAGED, "h2o", KVC_PREFILL_ONCE},
    {KVC_LAYOUT_CONTIGUOUS, "h2o", KVC_PREFILL_ONCE},
    {KVC_LAYOUT_PAGED, "snapkv", KVC_PREFILL_PER_CHUNK},
    {KVC_LAYOUT_CONTIGUOUS, "snapkv", KVC_PREFILL_PER_CHUNK},
    // Every decode step compresses after its attention, which has added to the statistics.
    {KVC_LAYOUT_PAGED, "h2o", KVC_PREFILL_PER_CHUNK, 1},
    {KVC_LAYOUT_CONTIGUOUS, "h2o", KVC_PREFILL_PER_CHUNK, 1},
    // Every decode step rewrites heads that demote (f32 to f16).
    {KVC_LAYOUT_PAGED, "h2o", KVC_PREFILL_PER_CHUNK, 1, KVC_DTYPE_F16},
};

// The one-token appends that run a pending "once" compression first.
bool runs_once_compression(const Setup& setup, const std::string& call) {
  return setup.prefill == KVC_PREFILL_ONCE && call.find("(one token") != std::string::npos;
}

}  // namespace

TEST_CASE("faults: every failed backend call leaves the cache as it was") {
  kvt::ContextPtr ctx = kvt::make_context(kStoresYaml);
  KVT_REQUIRE_OK(kvc_context_load_plugin(ctx.get(), KVC_TEST_FAULT_PLUGIN));
  for (const Setup& setup : kSetups) {
    check_faults(ctx.get(), setup,
                 [&](const std::string& call) { return !runs_once_compression(setup, call); });
  }
}

// The "once" compression runs before the append: a failure after it must undo it too.
TEST_CASE("faults: a failed append after the once compression leaves the cache as it was") {
  kvt::ContextPtr ctx = kvt::make_context(kStoresYaml);
  KVT_REQUIRE_OK(kvc_context_load_plugin(ctx.get(), KVC_TEST_FAULT_PLUGIN));
  for (const Setup& setup : kSetups) {
    check_faults(ctx.get(), setup,
                 [&](const std::string& call) { return runs_once_compression(setup, call); });
  }
}
