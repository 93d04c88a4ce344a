// The input as a program of C API calls on one small cache: its first bytes choose the shape,
// storage, memory limit, policy and demotion, the rest is a list of calls (sequence operations, append,
// attend, append_attend, compress, report_stats, export/import, queries, the store calls:
// offload, restore, drop, prefix save and load, and the prefix cache's attach, publish and
// lookup) whose arguments come from the input, bad ones
// included; a batch is made by kvc_batch_init or by kvc_batch_init_sized with a size from the
// input, which must write exactly that many bytes, or none below the oldest layout. After every call: an error changed neither kvc_cache_stats nor any sequence's
// lengths, bytes_used is within the limit, and the cache holds the sequences the calls
// created, their lengths summing to tokens_stored; at the end, with every sequence removed, it
// holds nothing but the prefix cache's blocks. Each program has its own context and host stores ("big", never full, whose
// contents the program models exactly, and "tiny", which refuses most values), so a run does
// not depend on the inputs before it.
#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstring>
#include <map>
#include <set>
#include <string>
#include <utility>

#include "fuzz_support.hpp"
#include "kvcache/kvcache_format.h"

namespace {

constexpr const char* kPolicies[] = {"full", "window",    "streaming", "h2o",
                                     "tova", "snapkv",    "pyramidkv", "adakv",
                                     "knorm", "keydiff", "random"};
constexpr size_t kMemoryLimits[] = {1024, 4096, 16384, 65536};
constexpr int32_t kHeadDims[] = {1, 4, 16, 32};
constexpr double kGrowthFactors[] = {2.0, 1.01, 1.5, 16.0};
// demote_keep: valid shares, then values outside [0, 1] that must be refused.
constexpr double kDemoteKeeps[] = {0.25, 0.0, 1.0, 0.5, 1.5, -0.25};
// The sequence ids calls name; the snapshots cover those that can exist.
constexpr int32_t kSeqIds[] = {0, 1, 2, 3, 0, 1, -1, INT32_MAX};
constexpr int32_t kTrackedIds[] = {0, 1, 2, 3, INT32_MAX};
constexpr int kMaxCalls = 200;
constexpr int kOps = 25;

constexpr const char* kStoresYaml =
    "threads: 1\n"
    "stores:\n"
    "  big: { plugin: host, params: { capacity: 64MiB } }\n"
    "  tiny: { plugin: host, params: { capacity: 2KiB } }\n";
constexpr const char* kStoreNames[] = {"big", "big", "tiny", "missing", "", nullptr};
constexpr const char* kKeys[] = {"k0", "k1", "k2", "k0", "", nullptr};
constexpr int32_t kChunkTokens[] = {1, 2, 4, 8, 3, 0, -1, 65537};

kvc_status_code code_of(kvc_status* status) {
  const kvc_status_code code = kvc_status_get_code(status);
  kvf::ok(status);
  return code;
}

// A prompt prefix the program saved into the "big" store, whose chunks are all there.
struct SavedPrefix {
  std::string model;
  int32_t chunk_tokens;
  std::vector<int32_t> tokens;  // the saved tokens only
};

struct Snapshot {
  kvc_cache_stats stats;
  std::vector<std::vector<int32_t>> lengths;  // per tracked id
};

// Pseudo-random tensor contents: finite values mostly, any bit pattern when asked.
class Filler {
 public:
  explicit Filler(uint32_t seed) : state_(seed * 2654435761u + 1) {}
  uint32_t next() {
    state_ = state_ * 1664525u + 1013904223u;
    return state_ >> 8;
  }
  void fill(uint8_t* out, kvc_dtype dtype, size_t elements, bool raw) {
    for (size_t i = 0; i < elements; ++i) {
      const uint32_t r = next();
      if (dtype == KVC_DTYPE_F32) {
        float f = static_cast<float>(static_cast<int32_t>(r % 2001) - 1000) / 500.0f;
        uint32_t bits;
        std::memcpy(&bits, &f, 4);
        if (raw) bits = r * 2246822519u;
        std::memcpy(out + 4 * i, &bits, 4);
      } else {
        uint16_t bits;
        if (raw) {
          bits = static_cast<uint16_t>(r);
        } else if (dtype == KVC_DTYPE_F16) {  // exponent 11..18: magnitudes 1/16..16
          bits = static_cast<uint16_t>((r & 0x83FF) | (((r >> 10) % 8 + 11) << 10));
        } else {  // bf16: the same range
          bits = static_cast<uint16_t>((r & 0x807F) | (((r >> 10) % 8 + 123) << 7));
        }
        std::memcpy(out + 2 * i, &bits, 2);
      }
    }
  }

 private:
  uint32_t state_;
};

struct Tensor {
  std::vector<uint8_t> bytes;
  kvc_tensor view;
};

class Program {
 public:
  explicit Program(kvf::Input& in) : in_(in) {}

  void run() {
    kvf::shared_context();  // keeps the plugin libraries loaded between programs
    kvf::require_ok(kvc_context_create(kStoresYaml, &context_), "kvc_context_create");
    kvc_context_set_logger(context_, kvf::discard_log, nullptr, KVC_LOG_OFF);
    if (create_cache()) {
      for (int calls = 0; calls < kMaxCalls && !in_.empty(); ++calls) step();
      for (int32_t id : std::set<int32_t>(live_)) {
        kvf::require_ok(kvc_seq_remove(cache_, id), "kvc_seq_remove");
      }
      const kvc_cache_stats s = kvf::stats_of(cache_);
      kvf::check(s.bytes_used == s.bytes_cached && s.tokens_stored == 0 &&
                     (s.blocks_used == 0) == (s.bytes_cached == 0) && s.bytes_shared == 0 &&
                     s.sequences == 0 && (prefix_cache_ || s.bytes_cached == 0),
                 "with every sequence removed the cache still holds something");
      kvf::check(demotes_ || s.tokens_demoted == 0, "a cache without demotion demoted tokens");
      kvc_cache_destroy(cache_);
    }
    kvc_context_destroy(context_);
  }

 private:
  bool create_cache() {
    const uint8_t shape = in_.u8(), storage = in_.u8(), limits = in_.u8();
    const uint8_t budget = in_.u8(), kept = in_.u8(), triggers = in_.u8();
    kvc_cache_params p;
    kvc_cache_params_init(&p);
    p.layers = layers_ = 1 + shape % 2;
    p.kv_heads = kv_heads_ = 1 + (shape >> 1) % 2;
    p.q_heads = q_heads_ = kv_heads_ * (1 + (shape >> 2) % 2);
    p.head_dim = head_dim_ = kHeadDims[(shape >> 3) % 4];
    p.dtype = dtype_ = static_cast<kvc_dtype>(storage % KVC_FORMAT_CODE_END);
    // V in the format of K (the default), or in any of the table's.
    const int v_choice = (shape >> 5) % (KVC_FORMAT_CODE_END + 1);
    p.v_dtype = v_choice == 0 ? -1 : v_choice - 1;
    v_dtype_ = v_choice == 0 ? dtype_ : static_cast<kvc_dtype>(v_choice - 1);
    // K rotated or not (budget's high bits, which the budget does not read).
    p.k_rotation = k_rotation_ = (budget >> 5) % 2;
    p.layout = static_cast<kvc_layout>((storage >> 2) % 2);
    p.block_tokens = 1 + (storage >> 3) % 8;
    p.growth_factor = kGrowthFactors[storage >> 6];
    p.memory_limit = kMemoryLimits[limits % 4];
    // Prefix caching (the limits' high bits, which the limit and policy do not read); a
    // contiguous cache refuses it.
    p.prefix_cache = prefix_cache_ = (limits >> 6) % 2;
    const size_t policy = (limits >> 2) % (std::size(kPolicies) + 1);
    if (policy > 0) {
      p.policy = kPolicies[policy - 1];
      if (budget % 2 == 0) {
        p.budget = 1 + (budget >> 1) % 16;
      } else {
        p.budget_ratio = ((budget >> 1) % 8 + 1) / 8.0;
      }
      p.sinks = kept % 6 - 1;
      p.recent = (kept >> 3) % 6 - 1;
      p.prefill = static_cast<kvc_prefill_compression>(triggers % 3);
      p.decode_every = (triggers >> 2) % 4;
      p.decode_slack = (triggers >> 4) % 4;
    }
    // Demotion (the budget's bit 6, which nothing above reads): one more byte, with formats
    // from -1 (not demoted) to one past the table's and shares in and outside [0, 1]; with or
    // without a policy, so the refusals are reached too.
    const double default_keep = p.demote_keep;
    if ((budget >> 6) % 2 != 0) {
      constexpr int kFormatChoices = KVC_FORMAT_CODE_END + 2;
      const uint8_t demote = in_.u8();
      p.demote_k_dtype = demote % kFormatChoices - 1;
      p.demote_v_dtype = demote / kFormatChoices % kFormatChoices - 1;
      p.demote_keep = kDemoteKeeps[demote / (kFormatChoices * kFormatChoices) %
                                   std::size(kDemoteKeeps)];
    }
    demote_k_dtype_ = p.demote_k_dtype;
    demote_v_dtype_ = p.demote_v_dtype;
    demotes_ = p.demote_k_dtype != -1 || p.demote_v_dtype != -1;
    // A cache that does not demote reads back the default share.
    demote_keep_ = demotes_ ? p.demote_keep : default_keep;
    return kvf::ok(kvc_cache_create(context_, &p, &cache_));
  }

  // ---------------------------------------------------------------- arguments
  int32_t seq_id() { return kSeqIds[in_.pick(std::size(kSeqIds))]; }
  int32_t layer() {  // valid, one past the last, or -1
    const int32_t l = static_cast<int32_t>(in_.pick(layers_ + 2));
    return l <= layers_ ? l : -1;
  }
  int32_t kv_head() {
    const int32_t h = static_cast<int32_t>(in_.pick(kv_heads_ + 2));
    return h <= kv_heads_ ? h : -1;
  }
  // A token count or position: small mostly, else an edge.
  int32_t amount() {
    constexpr int32_t kEdges[] = {-1, 0, INT32_MAX, INT32_MIN, 1 << 30, 64};
    const uint8_t b = in_.u8();
    return b < 200 ? b % 32 : kEdges[b % std::size(kEdges)];
  }
  int32_t position_for(int32_t seq) {
    const uint8_t b = in_.u8();
    if (b < 200) {
      const int64_t p = int64_t{next_position(seq)} + b % 4;
      return p > INT32_MAX ? INT32_MAX : static_cast<int32_t>(p);
    }
    if (b < 240) return b - 200;
    constexpr int32_t kEdges[] = {-1, INT32_MAX, INT32_MAX - 1, 1 << 30};
    return kEdges[b % 4];
  }
  int32_t next_position(int32_t seq) const {
    auto it = next_.find(seq);
    return it == next_.end() ? 0 : it->second;
  }
  int32_t token_count() {
    const uint8_t b = in_.u8();
    if (b < 128) return 1;
    if (b < 244) return 1 + b % 8;
    constexpr int32_t kEdges[] = {0, -1, 64, 2};
    return kEdges[b % 4];
  }

  // [rows, heads, head_dim] of a dtype the byte chooses (f32, the storage format `storage`,
  // one of the formats without scales, or not a dtype at all), any row stride, sized exactly
  // as the header defines the layout (a format with scales, which no tensor may have, or a
  // value outside the table as f32).
  Tensor tensor(size_t rows, int32_t heads, kvc_dtype storage) {
    const uint8_t b = in_.u8();
    kvc_dtype dtype = (b % 8 < 3) ? KVC_DTYPE_F32 : storage;
    if (b % 8 == 6) dtype = static_cast<kvc_dtype>((storage + 1) % 3);
    if (b % 8 == 7) dtype = static_cast<kvc_dtype>(KVC_FORMAT_CODE_END);
    const size_t row = static_cast<size_t>(heads) * head_dim_;
    const size_t strides[] = {0, row, row + 3, row > 1 ? row - 1 : 0};
    const size_t stride = strides[(b >> 3) % 4];
    const size_t step = stride == 0 ? row : stride;
    const size_t elements = rows == 0 ? 0 : (rows - 1) * step + row;
    const bool plain = kvc_format_is_valid(dtype) && !kvc_format_has_scales(dtype);
    const size_t element_size = plain ? kvc_format_row_bytes(dtype, 1) : 4;
    Tensor t;
    t.bytes.resize(elements * element_size);
    Filler(in_.u8()).fill(t.bytes.data(), plain ? dtype : KVC_DTYPE_F32, elements,
                          (b >> 5) == 6);
    const bool null = (b >> 5) == 7;
    t.view = kvc_tensor{null ? nullptr : t.bytes.data(), dtype, KVC_DEVICE_HOST, stride};
    return t;
  }

  struct Batch {
    std::vector<int32_t> ids, counts, positions, prompt_end;
    kvc_batch batch;
    size_t rows = 0;
  };
  Batch batch() {
    Batch b;
    const uint8_t n = in_.u8();
    const int32_t n_seqs = n < 240 ? 1 + n % 3 : (n % 2 == 0 ? 0 : -1);
    for (int32_t i = 0; i < std::max(n_seqs, 0); ++i) {
      b.ids.push_back(seq_id());
      b.counts.push_back(token_count());
      for (int32_t t = 0; t < std::max(b.counts.back(), 0); ++t) {
        b.positions.push_back(t == 0 ? position_for(b.ids.back())
                                     : (b.positions.back() == INT32_MAX
                                            ? INT32_MAX
                                            : b.positions.back() + 1));
      }
    }
    b.rows = b.positions.size();
    init_batch(b, n_seqs);
    // prompt_end, from the same byte: none, the last sequence's chunk marked, every one
    // marked, or an entry that is not 0 or 1.
    const int marks = n < 240 ? (n / 3) % 4 : 0;
    if (marks > 0 && n_seqs > 0) {
      b.prompt_end.assign(static_cast<size_t>(n_seqs), marks == 2 ? 1 : 0);
      b.prompt_end.back() = marks == 3 ? 2 : 1;
      b.batch.prompt_end = b.prompt_end.data();
    }
    return b;
  }
  // The header's kvc_batch_init, or kvc_batch_init_sized with a size from the input into a
  // buffer of canary bytes: it writes exactly `size` bytes for a size from the oldest layout
  // on, nothing below. A refused size leaves the batch zeroed (struct_size 0: the call that
  // reads it refuses it); a larger one is passed on as this header's size.
  void init_batch(Batch& b, int32_t n_seqs) {
    const uint8_t form = in_.u8();
    if (form < 160) {
      kvc_batch_init(&b.batch, n_seqs, b.ids.data(), b.counts.data(), b.positions.data());
      return;
    }
    constexpr size_t kOldest = offsetof(kvc_batch, stream);
    const size_t size = form % 3 == 0   ? kOldest
                        : form % 3 == 1 ? sizeof(kvc_batch) + in_.pick(64)
                                        : in_.pick(sizeof(kvc_batch) + 1);
    constexpr unsigned char kCanary = 0xA5;
    std::vector<unsigned char> buffer(std::max(size, sizeof(kvc_batch)) + 32, kCanary);
    kvc_batch_init_sized(reinterpret_cast<kvc_batch*>(buffer.data()), size, n_seqs, b.ids.data(),
                         b.counts.data(), b.positions.data());
    const size_t written = size >= kOldest ? size : 0;
    for (size_t i = written; i < buffer.size(); ++i) {
      kvf::check(buffer[i] == kCanary, "kvc_batch_init_sized(size " + std::to_string(size) +
                                           ") wrote byte " + std::to_string(i));
    }
    for (size_t i = sizeof(kvc_batch); i < written; ++i) {
      kvf::check(buffer[i] == 0, "kvc_batch_init_sized left a byte past kvc_batch unzeroed");
    }
    b.batch = kvc_batch{};
    if (written == 0) return;
    std::memcpy(&b.batch, buffer.data(), std::min(size, sizeof(kvc_batch)));
    kvf::check(b.batch.struct_size == size, "kvc_batch_init_sized set another struct_size");
    b.batch.struct_size = static_cast<uint32_t>(std::min(size, sizeof(kvc_batch)));
  }
  // After a successful append: the next positions the program proposes.
  void appended(const Batch& b) {
    size_t row = 0;
    for (size_t i = 0; i < b.ids.size(); ++i) {
      row += static_cast<size_t>(b.counts[i]);
      const int32_t last = b.positions[row - 1];
      next_[b.ids[i]] = last == INT32_MAX ? INT32_MAX : last + 1;
    }
  }

  kvc_attention_params attention_params() {
    const uint8_t b = in_.u8();
    kvc_attention_params p;
    kvc_attention_params_init(&p);
    constexpr float kScales[] = {0.0f, 0.25f, -1.0f, 3.0f};
    constexpr int32_t kWindows[] = {0, 1, 3, -1};
    p.scale = kScales[b % 4];
    p.sliding_window = kWindows[(b >> 2) % 4];
    p.softcap = (b >> 4) % 4 == 3 ? 2.5f : 0.0f;
    return p;
  }

  // ---------------------------------------------------------------- calls
  Snapshot snapshot() const {
    Snapshot s{kvf::stats_of(cache_), {}};
    for (int32_t id : kTrackedIds) s.lengths.push_back(lengths(id));
    return s;
  }
  std::vector<int32_t> lengths(int32_t id) const {
    return kvf::lengths_of(cache_, id, layers_, kv_heads_);
  }

  void step() {
    const Snapshot before = snapshot();
    const uint8_t op = in_.u8();
    const bool succeeded = call(op % kOps);
    const Snapshot after = snapshot();
    if (!succeeded) {
      kvf::check(kvf::same_stats(before.stats, after.stats),
                 "call " + std::to_string(op % kOps) + " failed and changed kvc_cache_stats from " +
                     kvf::describe(before.stats) + " to " + kvf::describe(after.stats));
      kvf::check(before.lengths == after.lengths,
                 "call " + std::to_string(op % kOps) + " failed and changed sequence lengths");
    }
    uint64_t stored = 0;
    for (const std::vector<int32_t>& lengths : after.lengths) {
      for (int32_t n : lengths) stored += static_cast<uint64_t>(n);
    }
    kvf::check(after.stats.tokens_stored == stored,
               "tokens_stored " + std::to_string(after.stats.tokens_stored) +
                   " is not the sum of the sequences' lengths, " + std::to_string(stored));
    kvf::check(after.stats.sequences == static_cast<int32_t>(live_.size()),
               "kvc_cache_stats counts " + std::to_string(after.stats.sequences) +
                   " sequences, the calls made " + std::to_string(live_.size()));
  }

  // Returns whether the call succeeded; checks what a success promises.
  bool call(uint8_t op) {
    switch (op) {
      case 0: {
        const int32_t id = seq_id();
        if (!kvf::ok(kvc_seq_create(cache_, id))) return false;
        live_.insert(id);
        next_[id] = 0;
        for (int32_t n : lengths(id)) kvf::check(n == 0, "a new sequence holds tokens");
        return true;
      }
      case 1: {
        const int32_t id = seq_id();
        if (!kvf::ok(kvc_seq_remove(cache_, id))) return false;
        live_.erase(id);
        kvf::check(lengths(id).empty(), "a removed sequence still has lengths");
        return true;
      }
      case 2: {
        const int32_t src = seq_id(), dst = seq_id();
        if (!kvf::ok(kvc_seq_fork(cache_, src, dst))) return false;
        live_.insert(dst);
        next_[dst] = next_position(src);
        kvf::check(lengths(dst) == lengths(src), "a fork holds other lengths than its source");
        return true;
      }
      case 3: {
        const int32_t id = seq_id(), position = amount();
        const std::vector<int32_t> old = lengths(id);
        if (!kvf::ok(kvc_seq_truncate(cache_, id, position))) return false;
        const std::vector<int32_t> now = lengths(id);
        for (size_t i = 0; i < now.size(); ++i) {
          kvf::check(now[i] <= old[i], "kvc_seq_truncate added tokens");
        }
        if (position >= 0 && position < next_position(id)) next_[id] = position;
        return true;
      }
      case 4: {
        const int32_t id = seq_id(), first = amount(), end = amount();
        return kvf::ok(kvc_seq_remove_range(cache_, id, first, end));
      }
      case 5: {
        const int32_t id = seq_id(), tokens = amount();
        return kvf::ok(kvc_seq_reserve(cache_, id, tokens));
      }
      case 6:
      case 13:
        return append();
      case 7:
        return attend(false);
      case 8:
      case 14:
      case 15:
        return attend(true);
      case 9: {
        const int32_t l = in_.pick(layers_ + 2) == 0 ? layers_ : layer_or_all();
        const uint8_t n = in_.u8();
        const int32_t n_seqs = n < 240 ? n % 4 : -1;
        std::vector<int32_t> ids;
        for (int32_t i = 0; i < std::max(n_seqs, 0); ++i) ids.push_back(seq_id());
        return kvf::ok(kvc_compress(cache_, l, n_seqs, ids.data()));
      }
      case 10:
        return report_stats();
      case 11: {
        const int32_t src = seq_id(), dst = seq_id();
        const std::vector<uint8_t> bytes = kvf::export_of(cache_, src);
        if (bytes.empty()) return false;
        // A failed export leaves nothing to check; the import is the call.
        if (!kvf::ok(kvc_seq_import(cache_, dst, bytes.data(), bytes.size()))) return false;
        live_.insert(dst);
        next_[dst] = next_position(src);
        kvf::check(kvf::export_of(cache_, dst) == bytes, "an import exports other bytes");
        return true;
      }
      case 16:
        return offload();
      case 17:
        return restore();
      case 18:
        return drop();
      case 19:
        return prefix_save();
      case 20:
        return prefix_load();
      case 21:
        return prefix_publish();
      case 22:
        return prefix_attach();
      case 23:
        return prefix_lookup();
      case 24:
        return set_stream();
      default:
        return query();
    }
  }

  // Streams stand in for an engine's: the cpu backend passes them on and never reads them,
  // so every call after one is set works as before.
  bool set_stream() {
    static int streams[2];
    const uint32_t k = in_.pick(3);
    kvf::require_ok(kvc_cache_set_stream(cache_, k < 2 ? &streams[k] : nullptr),
                    "kvc_cache_set_stream");
    return true;
  }

  // ---------------------------------------------------------------- stores
  const char* store_name() { return kStoreNames[in_.pick(std::size(kStoreNames))]; }
  const char* key() {
    static const std::string long_key(1025, 'k');
    const uint32_t k = in_.pick(std::size(kKeys) + 1);
    return k < std::size(kKeys) ? kKeys[k] : long_key.c_str();
  }
  static bool is_big(const char* store) { return store && std::strcmp(store, "big") == 0; }
  static bool valid_key(const char* key) { return key && *key && std::strlen(key) <= 1024; }

  bool offload() {
    const int32_t id = seq_id();
    const char* store = store_name();
    const char* k = key();
    const std::vector<uint8_t> bytes = kvf::export_of(cache_, id);
    if (!kvf::ok(kvc_seq_offload(cache_, id, store, k))) return false;
    kvf::check(!bytes.empty(), "kvc_seq_offload offloaded a sequence that cannot be exported");
    live_.erase(id);
    kvf::check(lengths(id).empty(), "an offloaded sequence still has lengths");
    if (is_big(store)) big_[k] = {bytes, next_position(id)};
    return true;
  }

  bool restore() {
    const int32_t id = seq_id();
    const char* store = store_name();
    const char* k = key();
    const bool existed = live_.count(id) != 0;
    const kvc_status_code code = code_of(kvc_seq_restore(cache_, id, store, k));
    if (is_big(store) && valid_key(k) && !existed && id >= 0) {
      const bool modelled = big_.count(k) != 0;
      kvf::check(modelled || code == KVC_ERR_NOT_FOUND,
                 "kvc_seq_restore of a key never offloaded did not report NOT_FOUND");
      kvf::check(!modelled || code != KVC_ERR_NOT_FOUND,
                 "kvc_seq_restore did not find a value the program offloaded");
    }
    if (code != KVC_OK) return false;
    const auto it = big_.find(k);
    if (is_big(store)) {
      kvf::check(kvf::export_of(cache_, id) == it->second.first,
                 "a restored sequence exports other bytes than it was offloaded with");
    }
    live_.insert(id);
    next_[id] = is_big(store) ? it->second.second : max_length(id);
    return true;
  }

  bool drop() {
    const char* store = store_name();
    const char* k = key();
    const kvc_status_code code = code_of(kvc_store_drop(context_, store, k));
    if (is_big(store) && valid_key(k)) {
      kvf::check((code == KVC_OK) == (big_.erase(k) == 1),
                 "kvc_store_drop disagrees with what the program stored");
    }
    return code == KVC_OK;
  }

  // A prefix of tokens 0..2 (so that prompts share prefixes often), filled in place: `prefix`
  // points into the other members.
  struct Prefix {
    std::vector<int32_t> tokens;
    kvc_prefix prefix;
    std::string model;
    bool valid;            // for the store calls
    bool valid_for_cache;  // for the prefix cache's, which do not read chunk_tokens
  };
  void read_prefix(Prefix& p) {
    const uint8_t b = in_.u8();
    const int32_t n = b < 250 ? b % 25 : -1;
    for (int32_t i = 0; i < std::max(n, 0); ++i) p.tokens.push_back(in_.u8() % 3);
    p.model = (b >> 5) % 4 == 3 ? "" : ((b >> 5) % 2 ? "model-b" : "model-a");
    const int32_t chunk = kChunkTokens[in_.pick(std::size(kChunkTokens))];
    kvc_prefix_init(&p.prefix, p.model.c_str(), p.tokens.data(), n);
    if (chunk != 3) p.prefix.chunk_tokens = chunk;  // 3 keeps the default, 256
    p.valid_for_cache = n >= 0 && !p.model.empty();
    p.valid = p.valid_for_cache && p.prefix.chunk_tokens >= 1 && p.prefix.chunk_tokens <= 65536;
  }

  bool prefix_save() {
    const int32_t id = seq_id();
    const char* store = store_name();
    Prefix p;
    read_prefix(p);
    int32_t saved = -12345;
    const bool ok = kvf::ok(kvc_prefix_save(cache_, id, store, &p.prefix, &saved));
    if (!ok) {
      kvf::check(saved == -12345, "a failed kvc_prefix_save set out_tokens_saved");
      return false;
    }
    kvf::check(p.valid && saved == p.prefix.n_tokens / p.prefix.chunk_tokens * p.prefix.chunk_tokens,
               "kvc_prefix_save reports " + std::to_string(saved) + " tokens saved");
    if (is_big(store) && saved > 0) {
      saved_.push_back({p.model, p.prefix.chunk_tokens,
                        std::vector<int32_t>(p.tokens.begin(), p.tokens.begin() + saved)});
    }
    return true;
  }

  // The tokens a load of `p` from "big" must restore: the longest whole-chunk prefix it
  // shares with a saved one of the same model and chunk size.
  int32_t expected_restored(const Prefix& p) const {
    const int32_t chunk = p.prefix.chunk_tokens;
    const int32_t whole = p.prefix.n_tokens / chunk * chunk;
    int32_t best = 0;
    for (const SavedPrefix& s : saved_) {
      if (s.model != p.model || s.chunk_tokens != chunk) continue;
      const int32_t limit = std::min(whole, static_cast<int32_t>(s.tokens.size()));
      int32_t same = 0;
      while (same < limit && s.tokens[same] == p.tokens[same]) ++same;
      best = std::max(best, same / chunk * chunk);
    }
    return best;
  }

  bool prefix_load() {
    const int32_t id = seq_id();
    const char* store = store_name();
    Prefix p;
    read_prefix(p);
    int32_t restored = -12345;
    if (!kvf::ok(kvc_prefix_load(cache_, id, store, &p.prefix, &restored))) {
      kvf::check(restored == -12345, "a failed kvc_prefix_load set out_tokens_restored");
      return false;
    }
    kvf::check(p.valid && restored >= 0 && restored % p.prefix.chunk_tokens == 0 &&
                   restored <= p.prefix.n_tokens,
               "kvc_prefix_load reports " + std::to_string(restored) + " tokens restored");
    if (is_big(store)) {
      kvf::check(restored == expected_restored(p),
                 "kvc_prefix_load restored " + std::to_string(restored) + " tokens, " +
                     std::to_string(expected_restored(p)) + " were saved");
    }
    live_.insert(id);
    for (int32_t n : lengths(id)) {
      kvf::check(n == restored, "a loaded prefix holds other than the restored tokens");
    }
    next_[id] = restored;
    return true;
  }

  // ---------------------------------------------------------------- prefix cache
  // A prefix cache call's result: a failure leaves `tokens` alone, a success reports whole
  // blocks of the prefix, and a cache without a prefix cache refuses every call.
  bool prefix_result(kvc_status* status, const Prefix& p, int32_t tokens, const char* call) {
    const kvc_status_code code = code_of(status);
    if (code != KVC_OK) {
      kvf::check(tokens == -12345, std::string("a failed ") + call + " set its out-parameter");
      kvf::check(prefix_cache_ || code == KVC_ERR_UNSUPPORTED || !p.valid_for_cache,
                 std::string(call) + " in a cache without a prefix cache is not UNSUPPORTED");
      return false;
    }
    kvf::check(prefix_cache_ && p.valid_for_cache && tokens >= 0 &&
                   tokens <= p.prefix.n_tokens && tokens % block_tokens() == 0,
               std::string(call) + " reports " + std::to_string(tokens) + " tokens");
    return true;
  }
  int32_t block_tokens() const {
    kvc_cache_params p;
    kvc_cache_params_init(&p);
    kvf::require_ok(kvc_cache_get_params(cache_, &p), "kvc_cache_get_params");
    return p.block_tokens;
  }

  bool prefix_publish() {
    const int32_t id = seq_id();
    Prefix p;
    read_prefix(p);
    int32_t published = -12345;
    if (!prefix_result(kvc_prefix_publish(cache_, id, &p.prefix, &published), p, published,
                       "kvc_prefix_publish")) {
      return false;
    }
    int32_t found = -12345;
    kvf::require_ok(kvc_prefix_lookup(cache_, &p.prefix, &found), "kvc_prefix_lookup");
    kvf::check(found >= published, "a lookup right after a publish finds fewer tokens");
    return true;
  }

  bool prefix_attach() {
    const int32_t id = seq_id();
    Prefix p;
    read_prefix(p);
    int32_t attached = -12345;
    if (!prefix_result(kvc_prefix_attach(cache_, id, &p.prefix, &attached), p, attached,
                       "kvc_prefix_attach")) {
      return false;
    }
    live_.insert(id);
    for (int32_t n : lengths(id)) {
      kvf::check(n == attached, "an attached sequence holds other than the attached tokens");
    }
    next_[id] = attached;
    return true;
  }

  bool prefix_lookup() {
    Prefix p;
    read_prefix(p);
    int32_t found = -12345;
    return prefix_result(kvc_prefix_lookup(cache_, &p.prefix, &found), p, found,
                         "kvc_prefix_lookup");
  }

  int32_t max_length(int32_t id) const {
    int32_t longest = 0;
    for (int32_t n : lengths(id)) longest = std::max(longest, n);
    return longest;
  }

  int32_t layer_or_all() {  // kvc_compress: -1 is every layer
    const int32_t l = static_cast<int32_t>(in_.pick(layers_ + 1));
    return l < layers_ ? l : -1;
  }

  bool append() {
    const int32_t l = layer();
    Batch b = batch();
    const Tensor k = tensor(b.rows, kv_heads_, dtype_), v = tensor(b.rows, kv_heads_, v_dtype_);
    if (!kvf::ok(kvc_append(cache_, l, &b.batch, &k.view, &v.view))) return false;
    appended(b);
    return true;
  }

  bool attend(bool append_too) {
    const int32_t l = layer();
    Batch b = batch();
    const Tensor q = tensor(b.rows, q_heads_, dtype_);
    const Tensor k = tensor(append_too ? b.rows : 0, kv_heads_, dtype_);
    const Tensor v = tensor(append_too ? b.rows : 0, kv_heads_, v_dtype_);
    const kvc_attention_params params = attention_params();
    const uint8_t o = in_.u8();
    const size_t row = static_cast<size_t>(q_heads_) * head_dim_;
    const size_t stride = o % 4 == 3 ? row + 1 : 0;
    std::vector<float> out(b.rows == 0 ? 0 : (b.rows - 1) * (stride ? stride : row) + row);
    kvc_tensor_mut ot{out.data(), o % 16 == 15 ? KVC_DTYPE_F16 : KVC_DTYPE_F32,
                      KVC_DEVICE_HOST, stride};
    const kvc_attention_params* pp = o % 8 == 0 ? nullptr : &params;
    if (!append_too) return kvf::ok(kvc_attend(cache_, l, &b.batch, &q.view, pp, &ot));
    if (!kvf::ok(kvc_append_attend(cache_, l, &b.batch, &q.view, &k.view, &v.view, pp, &ot))) {
      return false;
    }
    appended(b);
    return true;
  }

  bool report_stats() {
    const int32_t id = seq_id(), l = layer(), h = kv_head();
    constexpr uint32_t kKinds[] = {1, 2, 4, 3, 0};
    const auto kind = static_cast<kvc_stat_kind>(kKinds[in_.pick(5)]);
    int32_t n = 0;
    if (!kvf::ok(kvc_seq_length(cache_, id, l, h, &n))) n = 1;
    const uint8_t b = in_.u8();
    if (b % 8 == 6) n += 1;
    if (b % 8 == 7) n -= 1;
    std::vector<float> values(std::max(n, 0));
    for (size_t i = 0; i < values.size(); ++i) {
      values[i] = (b >> 3) % 8 == 7 ? (i % 2 ? NAN : -1.0f) : 0.125f * static_cast<float>(i % 8);
    }
    return kvf::ok(kvc_report_stats(cache_, id, l, h, kind, values.data(), n));
  }

  bool query() {
    switch (in_.pick(5)) {
      case 0: {
        int32_t n = 0;
        return kvf::ok(kvc_seq_length(cache_, seq_id(), layer(), kv_head(), &n));
      }
      case 1: {
        const int32_t id = seq_id(), l = layer(), h = kv_head();
        size_t count = 0;
        if (!kvf::ok(kvc_seq_view(cache_, id, l, h, nullptr, 0, &count))) return false;
        std::vector<kvc_segment_view> views(count);
        kvf::require_ok(kvc_seq_view(cache_, id, l, h, views.data(), views.size(), &count),
                        "kvc_seq_view");
        int64_t n = 0;
        int64_t previous = -1;
        // A view does not say which segments hold the demoted tier: with demotion, the smaller
        // of each tier's rows.
        const auto row_bytes = [this](kvc_dtype format, int32_t demoted) {
          const auto dim = static_cast<size_t>(head_dim_);
          const size_t own = kvc_format_row_bytes(format, dim);
          if (!demotes_ || demoted == -1) return own;
          return std::min(own, kvc_format_row_bytes(static_cast<kvc_dtype>(demoted), dim));
        };
        const size_t k_row = row_bytes(dtype_, demote_k_dtype_);
        const size_t v_row = row_bytes(v_dtype_, demote_v_dtype_);
        for (const kvc_segment_view& view : views) {
          for (int32_t t = 0; t < view.count; ++t) {
            kvf::check(view.pos[t] > previous, "stored positions not increasing");
            previous = view.pos[t];
            // Touch the first and last byte of each row, so ASan sees a short segment.
            volatile uint8_t sink = static_cast<const uint8_t*>(view.k)[t * k_row] ^
                                    static_cast<const uint8_t*>(view.v)[(t + 1) * v_row - 1];
            (void)sink;
          }
          n += view.count;
        }
        int32_t length = -1;
        kvf::require_ok(kvc_seq_length(cache_, id, l, h, &length), "kvc_seq_length");
        kvf::check(n == length, "views hold other than kvc_seq_length tokens");
        return true;
      }
      case 2: {
        kvc_cache_params p;
        kvc_cache_params_init(&p);
        kvf::require_ok(kvc_cache_get_params(cache_, &p), "kvc_cache_get_params");
        kvf::check(p.k_dtype == dtype_ && p.v_dtype == v_dtype_, "formats read back as others");
        kvf::check(p.k_rotation == k_rotation_, "the rotation of K read back as another");
        kvf::check(p.demote_k_dtype == demote_k_dtype_ && p.demote_v_dtype == demote_v_dtype_ &&
                       p.demote_keep == demote_keep_,
                   "the demotion read back as another");
        // The table's entry of a format, or of 3, which is none.
        const auto format = static_cast<kvc_dtype>(in_.u8() % 4);
        kvc_format_info described;
        described.struct_size = sizeof described;
        const bool known = kvf::ok(kvc_format_describe(format, &described));
        kvf::check(known == (kvc_format_is_valid(format) != 0), "kvc_format_describe's verdict");
        kvf::check(!known || (described.group_bytes == kvc_format_group_bytes(format) &&
                              described.group_size == kvc_format_group_size(format)),
                   "kvc_format_describe disagrees with the header's table");
        kvc_policy_info info;
        kvc_policy_info_init(&info);
        return kvf::ok(kvc_cache_policy_info(cache_, &info));
      }
      case 3: {
        size_t bytes = 0;
        const int32_t prompt = amount(), chunk = amount(), fresh = amount();
        const uint8_t how = in_.u8();
        if (how % 3 == 0) {
          return kvf::ok(kvc_cache_estimate_peak_bytes(cache_, prompt, chunk, fresh, &bytes));
        }
        kvc_estimate_request request;
        kvc_estimate_request_init(&request, prompt, chunk, fresh);
        request.marks_prompt_end = how % 3 == 2 ? 1 : 0;
        if (!kvf::ok(kvc_cache_estimate(cache_, &request, &bytes))) return false;
        if (request.marks_prompt_end == 0) {
          size_t legacy = 0;
          kvf::require_ok(kvc_cache_estimate_peak_bytes(cache_, prompt, chunk, fresh, &legacy),
                          "kvc_cache_estimate_peak_bytes");
          kvf::check(legacy == bytes, "an unmarked kvc_cache_estimate differs from "
                                      "kvc_cache_estimate_peak_bytes");
        }
        return true;
      }
      default: {
        size_t size = 0;
        const int32_t id = seq_id();
        if (!kvf::ok(kvc_seq_export_size(cache_, id, &size))) return false;
        // Too small a buffer must be refused, writing nothing.
        std::vector<uint8_t> small(size > 0 ? size - 1 : 0, 0xAB);
        size_t written = 12345;
        kvf::check(!kvf::ok(kvc_seq_export(cache_, id, small.data(), small.size(), &written)),
                   "kvc_seq_export wrote into a buffer smaller than its size");
        kvf::check(written == 12345, "a failed kvc_seq_export set out_written");
        for (uint8_t byte : small) kvf::check(byte == 0xAB, "a failed kvc_seq_export wrote");
        return true;
      }
    }
  }

  kvf::Input& in_;
  kvc_context* context_ = nullptr;
  kvc_cache* cache_ = nullptr;
  int32_t layers_ = 0, kv_heads_ = 0, q_heads_ = 0, head_dim_ = 0;
  bool prefix_cache_ = false;
  kvc_dtype dtype_ = KVC_DTYPE_F32;    // of K
  kvc_dtype v_dtype_ = KVC_DTYPE_F32;  // of V
  int32_t k_rotation_ = KVC_ROTATION_NONE;
  int32_t demote_k_dtype_ = -1, demote_v_dtype_ = -1;
  double demote_keep_ = 0.25;
  bool demotes_ = false;
  std::set<int32_t> live_;
  std::map<int32_t, int32_t> next_;
  // The "big" store's values: the export image and the next position of each offloaded key.
  std::map<std::string, std::pair<std::vector<uint8_t>, int32_t>> big_;
  std::vector<SavedPrefix> saved_;
};

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  kvf::Input in(data, size);
  Program(in).run();
  return 0;
}
