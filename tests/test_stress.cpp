// Concurrency stress: many threads append, attend, compress, fork and remove disjoint
// sequences of one cache; every attention output and what the survivors store must equal,
// bit for bit, a sequential run of the same work. Run under TSan by `scripts/test --sanitize`.
#include <algorithm>
#include <cstdint>
#include <cstring>
#include <exception>
#include <mutex>
#include <shared_mutex>
#include <string>
#include <thread>
#include <vector>

#include "sequence_image.hpp"
#include "test_support.hpp"

namespace {

constexpr int32_t kLayers = 2;
constexpr int32_t kKvHeads = 2;
constexpr int32_t kQHeads = 4;
constexpr int32_t kHeadDim = 16;
constexpr int kThreads = 8;
constexpr int kLanesPerThread = 8;
constexpr int32_t kPrompt = 40;
constexpr int32_t kChunk = 16;
constexpr int32_t kDecode = 12;
constexpr int32_t kCompressAt = 5;  // decode step after which the parent is compressed
constexpr int32_t kForkAt = 8;      // decode step after which the parent is forked

// Deterministic inputs: a value of (lane, stream, index) in [-1, 1).
float input(uint64_t lane, uint64_t stream, uint64_t index) {
  uint64_t x = (lane << 40) ^ (stream << 32) ^ index;
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  x ^= x >> 31;
  return static_cast<float>(x >> 40) / static_cast<float>(1 << 23) - 1.0f;
}

// Exclusive access for the calls kvcache.h says need it (create, remove, fork); the data
// path takes it shared, so calls on disjoint sequences overlap.
class CacheAccess {
 public:
  explicit CacheAccess(kvc_cache* cache) : cache_(cache) {}
  template <class F>
  void shared(F f) {
    std::shared_lock<std::shared_mutex> lock(mu_);
    f(cache_);
  }
  template <class F>
  void exclusive(F f) {
    std::unique_lock<std::shared_mutex> lock(mu_);
    f(cache_);
  }

 private:
  kvc_cache* cache_;
  std::shared_mutex mu_;
};

// Failures are recorded, not thrown from worker threads: doctest's asserts are not
// thread-safe, so each lane keeps its first error and the main thread reports it.
struct Lane {
  int id = 0;
  std::vector<float> outputs;  // every attention output, in call order
  std::string error;
};

void record(Lane& lane, const char* what, kvc_status* st) {
  kvt::Status s{st};
  if (!s.ok() && lane.error.empty()) lane.error = std::string(what) + ": " + s.describe();
}

// One step of `n` tokens at `pos` on every layer of `seq`, through kvc_append_attend or
// kvc_append + kvc_attend, appending the outputs to the lane.
void step(CacheAccess& access, Lane& lane, int32_t seq, int32_t pos, int32_t n, bool split,
          uint64_t stream) {
  const size_t kv_elems = static_cast<size_t>(n) * kKvHeads * kHeadDim;
  const size_t q_elems = static_cast<size_t>(n) * kQHeads * kHeadDim;
  std::vector<int32_t> positions(n);
  for (int32_t i = 0; i < n; ++i) positions[i] = pos + i;
  kvc_batch batch;
  kvc_batch_init(&batch, 1, &seq, &n, positions.data());
  kvc_attention_params ap;
  kvc_attention_params_init(&ap);
  for (int32_t layer = 0; layer < kLayers; ++layer) {
    std::vector<float> k(kv_elems), v(kv_elems), q(q_elems), out(q_elems);
    const uint64_t base = (stream * kLayers + layer) * 3;
    for (size_t i = 0; i < kv_elems; ++i) k[i] = input(lane.id, base, pos * kv_elems + i);
    for (size_t i = 0; i < kv_elems; ++i) v[i] = input(lane.id, base + 1, pos * kv_elems + i);
    for (size_t i = 0; i < q_elems; ++i) q[i] = input(lane.id, base + 2, pos * q_elems + i);
    const kvc_tensor kt = kvt::tensor(k.data(), KVC_DTYPE_F32);
    const kvc_tensor vt = kvt::tensor(v.data(), KVC_DTYPE_F32);
    const kvc_tensor qt = kvt::tensor(q.data(), KVC_DTYPE_F32);
    kvc_tensor_mut ot = kvt::tensor_mut(out.data());
    access.shared([&](kvc_cache* c) {
      if (split) {
        record(lane, "kvc_append", kvc_append(c, layer, &batch, &kt, &vt));
        record(lane, "kvc_attend", kvc_attend(c, layer, &batch, &qt, &ap, &ot));
      } else {
        record(lane, "kvc_append_attend",
               kvc_append_attend(c, layer, &batch, &qt, &kt, &vt, &ap, &ot));
      }
    });
    lane.outputs.insert(lane.outputs.end(), out.begin(), out.end());
  }
}

// What a sequence stores on every (layer, KV head): positions, K and V, appended to `dst`;
// read through kvc_seq_export(), as the backend's memory may be no host memory.
void read_back(CacheAccess& access, Lane& lane, int32_t seq, std::vector<float>& dst) {
  std::vector<uint8_t> bytes;
  access.shared([&](kvc_cache* c) {
    size_t size = 0, written = 0;
    record(lane, "kvc_seq_export_size", kvc_seq_export_size(c, seq, &size));
    bytes.resize(size);
    record(lane, "kvc_seq_export", kvc_seq_export(c, seq, bytes.data(), size, &written));
  });
  if (!lane.error.empty()) return;
  try {
    const kvc::SequenceImage image = kvc::decode(bytes.data(), bytes.size());
    for (const kvc::HeadImage& head : image.heads) {
      const size_t rows = head.positions.size() * kHeadDim;  // f32 storage
      for (int32_t p : head.positions) dst.push_back(static_cast<float>(p));
      for (const uint8_t* from : {head.k_rows(), head.v_rows()}) {
        dst.resize(dst.size() + rows);
        std::memcpy(dst.data() + dst.size() - rows, from, rows * sizeof(float));
      }
    }
  } catch (const std::exception& e) {
    lane.error = std::string("decoding the export: ") + e.what();
  }
}

// The work of one lane: a prompt in chunks, decoding, a compression, a fork whose branches
// decode on, the parent removed, and the child's contents read back before it is removed.
void run_lane(CacheAccess& access, Lane& lane) {
  const int32_t parent = lane.id * 2;
  const int32_t child = parent + 1;
  access.exclusive([&](kvc_cache* c) { record(lane, "kvc_seq_create", kvc_seq_create(c, parent)); });
  for (int32_t pos = 0; pos < kPrompt; pos += kChunk)
    step(access, lane, parent, pos, std::min(kChunk, kPrompt - pos), false, 0);
  for (int32_t i = 0; i < kDecode; ++i) {
    const int32_t pos = kPrompt + i;
    step(access, lane, parent, pos, 1, i % 2 == 1, 0);
    if (i == kCompressAt) {
      access.shared([&](kvc_cache* c) {
        record(lane, "kvc_compress", kvc_compress(c, -1, 1, &parent));
      });
    }
    if (i == kForkAt) {
      access.exclusive([&](kvc_cache* c) {
        record(lane, "kvc_seq_fork", kvc_seq_fork(c, parent, child));
      });
    }
    if (i > kForkAt) step(access, lane, child, pos, 1, i % 2 == 0, 1);
  }
  access.exclusive([&](kvc_cache* c) { record(lane, "kvc_seq_remove", kvc_seq_remove(c, parent)); });
  read_back(access, lane, child, lane.outputs);
  access.exclusive([&](kvc_cache* c) { record(lane, "kvc_seq_remove", kvc_seq_remove(c, child)); });
}

struct Run {
  std::vector<Lane> lanes;
  kvc_cache_stats stats;
};

Run run_all(kvc_context* ctx, bool concurrent, kvc_prefill_compression prefill) {
  kvc_cache_params p;
  kvc_cache_params_init(&p);
  p.layers = kLayers;
  p.kv_heads = kKvHeads;
  p.q_heads = kQHeads;
  p.head_dim = kHeadDim;
  p.dtype = KVC_DTYPE_F32;
  p.block_tokens = 8;
  p.policy = "h2o";
  p.budget = 24;
  p.prefill = prefill;
  kvt::CachePtr cache = kvt::make_cache(ctx, p);
  CacheAccess access(cache.get());
  Run run;
  run.lanes.resize(kThreads * kLanesPerThread);
  for (size_t i = 0; i < run.lanes.size(); ++i) run.lanes[i].id = static_cast<int>(i);
  if (concurrent) {
    std::vector<std::thread> threads;
    for (int t = 0; t < kThreads; ++t) {
      threads.emplace_back([&run, &access, t] {
        for (int l = 0; l < kLanesPerThread; ++l) run_lane(access, run.lanes[t * kLanesPerThread + l]);
      });
    }
    for (std::thread& th : threads) th.join();
  } else {
    for (Lane& lane : run.lanes) run_lane(access, lane);
  }
  run.stats = kvt::get_stats(cache.get());
  return run;
}

}  // namespace

// With "once", each lane's first decode step on a layer takes the cache exclusively while the
// other lanes wait to go on with theirs.
TEST_CASE("stress: concurrent work on disjoint sequences equals the sequential run") {
  for (const kvc_prefill_compression prefill : {KVC_PREFILL_NONE, KVC_PREFILL_ONCE}) {
    CAPTURE(prefill);
    kvt::ContextPtr ctx = kvt::make_context();
    const Run sequential = run_all(ctx.get(), false, prefill);
    const Run concurrent = run_all(ctx.get(), true, prefill);
    for (size_t i = 0; i < sequential.lanes.size(); ++i) {
      const Lane& s = sequential.lanes[i];
      const Lane& c = concurrent.lanes[i];
      INFO("lane " << i);
      REQUIRE(s.error.empty());
      REQUIRE(c.error.empty());
      REQUIRE(s.outputs.size() == c.outputs.size());
      CHECK(std::memcmp(s.outputs.data(), c.outputs.data(), s.outputs.size() * sizeof(float)) == 0);
    }
    // The work did compress and every sequence is gone, in both runs alike.
    CHECK(sequential.stats.tokens_evicted > 0);
    CHECK(concurrent.stats.tokens_evicted == sequential.stats.tokens_evicted);
    CHECK(concurrent.stats.sequences == 0);
    CHECK(concurrent.stats.bytes_used == 0);
    CHECK(concurrent.stats.bytes_peak > 0);
  }
}
