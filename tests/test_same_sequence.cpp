// Calls on the same sequence from many threads (kvcache.h, "Thread safety"): one thread
// decodes on a sequence while others remove ranges of it, compress it, export, import and fork
// it. Every call must succeed or return a documented error, every export must be a state the
// sequence was in (each stored position's K and V as appended, positions increasing), and the
// final state must give the attention of a double-precision reference over what it stores.
// An offload racing appends must store every append that returned success before it removed
// the sequence. Run under TSan by `scripts/test --sanitize`.
#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <initializer_list>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "reference_attention.hpp"
#include "sequence_image.hpp"
#include "test_support.hpp"

namespace {

constexpr int32_t kLayers = 2;
constexpr int32_t kKvHeads = 2;
constexpr int32_t kQHeads = 4;
constexpr int32_t kHeadDim = 8;
constexpr int32_t kSeq = 0;
constexpr int32_t kPrompt = 24;  // prefilled in chunks of 8, the last marked as the prompt's end
constexpr int32_t kChunk = 8;
constexpr int32_t kDecodeSteps = 150;

// The value every (layer, row, element) of K (stream 0), V (1) or Q (2) has at a position:
// what a stored token must still hold after any compaction, fork, export or import.
float value(int32_t layer, int32_t stream, int32_t position, size_t element) {
  uint64_t x = (static_cast<uint64_t>(layer) << 50) ^ (static_cast<uint64_t>(stream) << 44) ^
               (static_cast<uint64_t>(position) << 16) ^ element;
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  x ^= x >> 31;
  return static_cast<float>(x >> 40) / static_cast<float>(1 << 23) - 1.0f;
}

// Rows of `heads` heads for positions [first, first + n) on a layer.
std::vector<float> rows(int32_t layer, int32_t stream, int32_t first, int32_t n, int32_t heads) {
  const size_t row = static_cast<size_t>(heads) * kHeadDim;
  std::vector<float> out(static_cast<size_t>(n) * row);
  for (int32_t t = 0; t < n; ++t) {
    for (size_t e = 0; e < row; ++e) out[t * row + e] = value(layer, stream, first + t, e);
  }
  return out;
}

// Failures seen on worker threads (doctest's asserts are not thread-safe): the first is kept.
class Failures {
 public:
  void add(const std::string& what) {
    std::lock_guard<std::mutex> lock(mutex_);
    if (first_.empty()) first_ = what;
  }
  // Records `st` unless it is success or one of the `allowed` codes; returns its code.
  kvc_status_code check(const char* call, kvc_status* st,
                       std::initializer_list<kvc_status_code> allowed = {}) {
    kvt::Status s{st};
    const kvc_status_code code = s.code();
    if (code != KVC_OK && std::find(allowed.begin(), allowed.end(), code) == allowed.end()) {
      add(std::string(call) + ": " + s.describe());
    }
    return code;
  }
  std::string first() {
    std::lock_guard<std::mutex> lock(mutex_);
    return first_;
  }

 private:
  std::mutex mutex_;
  std::string first_;
};

kvc_cache_params params(kvc_layout layout, kvc_prefill_compression prefill) {
  kvc_cache_params p;
  kvc_cache_params_init(&p);
  p.layers = kLayers;
  p.kv_heads = kKvHeads;
  p.q_heads = kQHeads;
  p.head_dim = kHeadDim;
  p.dtype = KVC_DTYPE_F32;
  p.layout = layout;
  p.block_tokens = 8;
  p.policy = "h2o";
  p.budget = 32;
  p.prefill = prefill;
  return p;
}

// n tokens from `first` on every layer of `seq` through kvc_append_attend; the outputs must
// be finite (what they equal depends on the other threads' calls).
kvc_status_code store(kvc_cache* cache, Failures& failures, int32_t seq, int32_t first, int32_t n,
                     bool prompt_end, std::initializer_list<kvc_status_code> allowed = {}) {
  std::vector<int32_t> positions(static_cast<size_t>(n));
  for (int32_t i = 0; i < n; ++i) positions[static_cast<size_t>(i)] = first + i;
  const int32_t end_flag = prompt_end ? 1 : 0;
  kvc_batch batch;
  kvc_batch_init(&batch, 1, &seq, &n, positions.data());
  batch.prompt_end = &end_flag;
  kvc_attention_params ap;
  kvc_attention_params_init(&ap);
  for (int32_t layer = 0; layer < kLayers; ++layer) {
    const std::vector<float> k = rows(layer, 0, first, n, kKvHeads);
    const std::vector<float> v = rows(layer, 1, first, n, kKvHeads);
    const std::vector<float> q = rows(layer, 2, first, n, kQHeads);
    std::vector<float> out(q.size());
    const kvc_tensor kt = kvt::tensor(k.data(), KVC_DTYPE_F32);
    const kvc_tensor vt = kvt::tensor(v.data(), KVC_DTYPE_F32);
    const kvc_tensor qt = kvt::tensor(q.data(), KVC_DTYPE_F32);
    kvc_tensor_mut ot = kvt::tensor_mut(out.data());
    const kvc_status_code code = failures.check(
        "kvc_append_attend", kvc_append_attend(cache, layer, &batch, &qt, &kt, &vt, &ap, &ot),
        allowed);
    if (code != KVC_OK) return code;
    for (float x : out) {
      if (!std::isfinite(x)) failures.add("kvc_append_attend wrote a non-finite output");
    }
  }
  return KVC_OK;
}

// The sequence's export, or empty when it grew between the two calls (the export then
// refuses the short buffer with INVALID_ARGUMENT, as documented) or no longer exists.
std::vector<uint8_t> export_of(kvc_cache* cache, Failures& failures, int32_t seq) {
  size_t size = 0, written = 0;
  if (failures.check("kvc_seq_export_size", kvc_seq_export_size(cache, seq, &size),
                     {KVC_ERR_NOT_FOUND}) != KVC_OK) {
    return {};
  }
  std::vector<uint8_t> bytes(size);
  if (failures.check("kvc_seq_export", kvc_seq_export(cache, seq, bytes.data(), size, &written),
                     {KVC_ERR_INVALID_ARGUMENT, KVC_ERR_NOT_FOUND}) != KVC_OK) {
    return {};
  }
  // A concurrent removal may have shrunk the sequence since its size was asked.
  if (written > size) failures.add("kvc_seq_export wrote more than the buffer holds");
  bytes.resize(written);
  return bytes;
}

// A state the sequence can have been in: on every (layer, KV head), positions increasing,
// each with the K and V appended at it, and no more than `newest`.
void check_consistent(const kvc::SequenceImage& image, int32_t newest, Failures& failures) {
  const size_t row = kHeadDim;
  for (int32_t layer = 0; layer < kLayers; ++layer) {
    for (int32_t h = 0; h < kKvHeads; ++h) {
      const kvc::HeadImage& head = image.heads[static_cast<size_t>(layer * kKvHeads + h)];
      const float* k = reinterpret_cast<const float*>(head.k_rows());
      const float* v = reinterpret_cast<const float*>(head.v_rows());
      for (size_t t = 0; t < head.positions.size(); ++t) {
        const int32_t p = head.positions[t];
        if (p < 0 || p > newest) {
          failures.add("position " + std::to_string(p) + " was never appended");
          return;
        }
        if (t > 0 && p <= head.positions[t - 1]) {
          failures.add("position " + std::to_string(p) + " is stored after " +
                       std::to_string(head.positions[t - 1]));
          return;
        }
        for (size_t e = 0; e < row; ++e) {
          if (k[t * row + e] != value(layer, 0, p, h * row + e) ||
              v[t * row + e] != value(layer, 1, p, h * row + e)) {
            failures.add("K/V of position " + std::to_string(p) + " is not what was appended");
            return;
          }
        }
      }
    }
  }
}

void check_export(const std::vector<uint8_t>& bytes, int32_t newest, Failures& failures) {
  if (bytes.empty()) return;
  try {
    check_consistent(kvc::decode(bytes.data(), bytes.size()), newest, failures);
  } catch (const std::exception& e) {
    failures.add(std::string("decoding an export: ") + e.what());
  }
}

void hammer(kvc_layout layout, kvc_prefill_compression prefill) {
  kvt::ContextPtr ctx = kvt::make_context();
  kvt::CachePtr owner = kvt::make_cache(ctx.get(), params(layout, prefill));
  kvc_cache* cache = owner.get();
  KVT_REQUIRE_OK(kvc_seq_create(cache, kSeq));
  Failures failures;
  std::atomic<int32_t> newest{-1};  // the newest position appended on every layer
  std::atomic<bool> done{false};

  std::vector<std::thread> threads;
  threads.emplace_back([&] {  // the engine: prefill in chunks, then decode
    for (int32_t first = 0; first < kPrompt; first += kChunk) {
      if (store(cache, failures, kSeq, first, kChunk, first + kChunk == kPrompt) == KVC_OK) {
        newest = first + kChunk - 1;
      }
    }
    for (int32_t i = 0; i < kDecodeSteps; ++i) {
      if (store(cache, failures, kSeq, kPrompt + i, 1, false) == KVC_OK) newest = kPrompt + i;
    }
    done = true;
  });
  threads.emplace_back([&] {  // drops older ranges, reads lengths, views and stats
    for (int32_t i = 0; !done; ++i) {
      const int32_t end = newest.load() - 8;
      if (end > 4) {
        const int32_t first = std::max(0, end - 3 - i % 5);
        failures.check("kvc_seq_remove_range", kvc_seq_remove_range(cache, kSeq, first, end));
      }
      int32_t length = 0;
      failures.check("kvc_seq_length", kvc_seq_length(cache, kSeq, i % kLayers, 0, &length));
      size_t segments = 0;
      failures.check("kvc_seq_view",
                     kvc_seq_view(cache, kSeq, i % kLayers, 1, nullptr, 0, &segments));
      kvc_cache_stats stats{};
      stats.struct_size = sizeof stats;
      failures.check("kvc_cache_get_stats", kvc_cache_get_stats(cache, &stats));
      std::this_thread::yield();
    }
  });
  threads.emplace_back([&] {  // compresses, exports and imports the export as a new sequence
    for (int32_t i = 0; !done; ++i) {
      const int32_t layer = i % 3 == 2 ? -1 : i % kLayers;
      failures.check("kvc_compress", kvc_compress(cache, layer, 1, &kSeq));
      const std::vector<uint8_t> bytes = export_of(cache, failures, kSeq);
      // The engine may have stored its next step (a chunk at most) on some layers already.
      check_export(bytes, newest.load() + kChunk, failures);
      if (bytes.empty()) continue;
      const int32_t copy = 1000000 + i;
      const kvc_status_code imported =
          failures.check("kvc_seq_import", kvc_seq_import(cache, copy, bytes.data(), bytes.size()));
      if (imported != KVC_OK) continue;
      const std::vector<uint8_t> again = export_of(cache, failures, copy);
      if (again != bytes) failures.add("an imported sequence does not export as its source");
      failures.check("kvc_seq_remove", kvc_seq_remove(cache, copy));
    }
  });
  threads.emplace_back([&] {  // forks, decodes a step on the fork, exports it, removes it
    for (int32_t i = 0; !done; ++i) {
      const int32_t fork = 2000000 + i;
      if (failures.check("kvc_seq_fork", kvc_seq_fork(cache, kSeq, fork)) != KVC_OK) continue;
      // The fork's newest position is at most the source's newest when it was taken.
      const int32_t next = newest.load() + 1000;
      store(cache, failures, fork, next, 1, false);
      check_export(export_of(cache, failures, fork), next, failures);
      failures.check("kvc_seq_remove", kvc_seq_remove(cache, fork));
    }
  });
  for (std::thread& t : threads) t.join();
  const std::string failure = failures.first();
  CHECK_MESSAGE(failure.empty(), failure);

  // The final state: consistent, and one more decode step attends over exactly what it holds.
  const int32_t last = kPrompt + kDecodeSteps - 1;
  const std::vector<uint8_t> bytes = export_of(cache, failures, kSeq);
  REQUIRE(!bytes.empty());
  const kvc::SequenceImage image = kvc::decode(bytes.data(), bytes.size());
  check_consistent(image, last, failures);
  const std::string inconsistent = failures.first();
  REQUIRE_MESSAGE(inconsistent.empty(), inconsistent);
  const int32_t next = last + 1, one = 1;
  kvc_batch batch;
  kvc_batch_init(&batch, 1, &kSeq, &one, &next);
  kvc_attention_params ap;
  kvc_attention_params_init(&ap);
  for (int32_t layer = 0; layer < kLayers; ++layer) {
    std::vector<std::vector<int32_t>> positions(kKvHeads);
    for (int32_t h = 0; h < kKvHeads; ++h) {
      positions[h] = image.heads[static_cast<size_t>(layer * kKvHeads + h)].positions;
    }
    const std::vector<float> k = rows(layer, 0, next, 1, kKvHeads);
    const std::vector<float> v = rows(layer, 1, next, 1, kKvHeads);
    const std::vector<float> q = rows(layer, 2, next, 1, kQHeads);
    std::vector<float> out(q.size());
    const kvc_tensor kt = kvt::tensor(k.data(), KVC_DTYPE_F32);
    const kvc_tensor vt = kvt::tensor(v.data(), KVC_DTYPE_F32);
    const kvc_tensor qt = kvt::tensor(q.data(), KVC_DTYPE_F32);
    kvc_tensor_mut ot = kvt::tensor_mut(out.data());
    KVT_REQUIRE_OK(kvc_append_attend(cache, layer, &batch, &qt, &kt, &vt, &ap, &ot));
    // Per KV head: the query heads of its group over that head's stored tokens and the new one.
    const int32_t group = kQHeads / kKvHeads;
    for (int32_t h = 0; h < kKvHeads; ++h) {
      ref::History one_head(1, kHeadDim);
      std::vector<int32_t> stored = positions[h];
      stored.push_back(next);
      for (int32_t position : stored) {
        const std::vector<float> kr = rows(layer, 0, position, 1, kKvHeads);
        const std::vector<float> vr = rows(layer, 1, position, 1, kKvHeads);
        one_head.append(position, kr.data() + h * kHeadDim, vr.data() + h * kHeadDim);
      }
      std::vector<double> expected(static_cast<size_t>(group) * kHeadDim);
      ref::attend(one_head, group, q.data() + h * group * kHeadDim, next, ref::Options{},
                  expected.data());
      for (size_t e = 0; e < expected.size(); ++e) {
        CHECK(out[h * group * kHeadDim + e] == doctest::Approx(expected[e]).epsilon(1e-4));
      }
    }
  }
}

}  // namespace

TEST_CASE("same sequence: decode, remove_range, compress, export/import and fork at once") {
  for (kvc_layout layout : {KVC_LAYOUT_PAGED, KVC_LAYOUT_CONTIGUOUS}) {
    for (kvc_prefill_compression prefill : {KVC_PREFILL_ONCE, KVC_PREFILL_PER_CHUNK}) {
      CAPTURE(layout);
      CAPTURE(prefill);
      hammer(layout, prefill);
    }
  }
}

TEST_CASE("same sequence: an offload racing appends stores every append that succeeded") {
  kvt::ContextPtr ctx = kvt::make_context("stores:\n  mem: { plugin: host }\n");
  kvc_cache_params p = params(KVC_LAYOUT_PAGED, KVC_PREFILL_NONE);
  p.policy = nullptr;
  kvt::CachePtr owner = kvt::make_cache(ctx.get(), p);
  kvc_cache* cache = owner.get();
  KVT_REQUIRE_OK(kvc_seq_create(cache, kSeq));
  Failures failures;
  std::atomic<int32_t> appended{0};
  int32_t last_ok = -1;  // the last position stored on every layer
  std::thread engine([&] {
    for (int32_t position = 0; position < 400; ++position) {
      if (store(cache, failures, kSeq, position, 1, false, {KVC_ERR_NOT_FOUND}) != KVC_OK) break;
      last_ok = position;
      appended = position + 1;
    }
  });
  while (appended.load() < 20) std::this_thread::yield();
  // A change between the offload's export and its removal keeps the sequence (INVALID_ARGUMENT);
  // the engine stops after 400 steps, so a later try succeeds.
  for (;;) {
    const kvc_status_code code = failures.check(
        "kvc_seq_offload", kvc_seq_offload(cache, kSeq, "mem", "seq"), {KVC_ERR_INVALID_ARGUMENT});
    if (code == KVC_OK) break;
  }
  engine.join();
  const std::string failure = failures.first();
  REQUIRE_MESSAGE(failure.empty(), failure);
  KVT_REQUIRE_OK(kvc_seq_restore(cache, 1, "mem", "seq"));
  const std::vector<uint8_t> bytes = export_of(cache, failures, 1);
  const kvc::SequenceImage image = kvc::decode(bytes.data(), bytes.size());
  // The offload may have come between the layers of the step after last_ok.
  check_consistent(image, last_ok + 1, failures);
  const std::string inconsistent = failures.first();
  REQUIRE_MESSAGE(inconsistent.empty(), inconsistent);
  for (const kvc::HeadImage& head : image.heads) {
    REQUIRE(head.positions.size() >= static_cast<size_t>(last_ok) + 1);
  }
}
