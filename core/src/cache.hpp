// A kvc_cache: sequences of per-(layer, KV head) stores in a memory-limited pool, with the
// batched data path (append, attend) running on a backend plugin.
#pragma once

#include <atomic>
#include <limits>
#include <memory>
#include <mutex>
#include <optional>
#include <shared_mutex>
#include <unordered_map>
#include <vector>

#include "backend.hpp"
#include "block_pool.hpp"
#include "config.hpp"
#include "context.hpp"
#include "head_snapshot.hpp"
#include "head_store.hpp"
#include "kvcache_support/large_bytes.hpp"
#include "policy.hpp"
#include "schedule.hpp"
#include "sequence_image.hpp"

namespace kvc {

struct Sequence {
  std::vector<HeadStore> heads;        // [layer * kv_heads + kv_head]
  std::vector<TriggerState> triggers;  // [layer]
};

class Cache {
 public:
  Cache(Context& context, const CacheConfig& config, const std::optional<PolicyConfig>& policy);
  ~Cache();
  Cache(const Cache&) = delete;
  Cache& operator=(const Cache&) = delete;

  const CacheConfig& config() const { return config_; }
  Context& context() const { return context_; }
  // The attention statistics stored per token (kvc_stat_flags), which an export carries.
  uint32_t stored_stats() const { return geometry_.stats; }

  void create_sequence(int32_t seq_id);
  // Throws what creating sequence `seq_id` now would: INVALID_ARGUMENT for a negative id,
  // ALREADY_EXISTS for one in use (for calls that check before slow work, such as a store's).
  void check_new_sequence_id(int32_t seq_id) const;
  void remove_sequence(int32_t seq_id);
  void reserve(int32_t seq_id, int32_t tokens);
  // A new sequence sharing every K/V block of the source, with its own statistics and counters.
  void fork_sequence(int32_t source_id, int32_t target_id);
  // Drops the stored tokens at positions in [first, end) on every layer and head.
  void remove_positions(int32_t seq_id, int32_t first, int32_t end);
  // Everything stored for a sequence (of each head, its first max_tokens tokens at most), and
  // a new sequence made from such an image (converted to this cache's dtype where that is
  // exact; all or nothing).
  SequenceImage export_sequence(int32_t seq_id,
                                size_t max_tokens = std::numeric_limits<size_t>::max());
  void import_sequence(int32_t seq_id, SequenceImage image);
  // The encoded size of export_sequence(seq_id), from the heads' lengths alone.
  size_t export_size(int32_t seq_id) const;
  // encode(export_sequence(seq_id)) into out[0, capacity), the rows copied from storage
  // straight into it; returns the bytes written. INVALID_ARGUMENT when capacity is short.
  size_t export_to(int32_t seq_id, uint8_t* out, size_t capacity);
  // encode(export_sequence(seq_id)) the same way, in a new buffer (std::bad_alloc when none).
  support::LargeBytes export_bytes(int32_t seq_id);
  int32_t length(int32_t seq_id, int32_t layer, int32_t kv_head) const;
  std::vector<kvc_segment> view(int32_t seq_id, int32_t layer, int32_t kv_head) const;
  const Policy* policy() const { return policy_.get(); }
  const Schedule& schedule() const { return schedule_; }

  void append(int32_t layer, const kvc_batch& batch, const kvc_tensor& k, const kvc_tensor& v);
  void attend(int32_t layer, const kvc_batch& batch, const kvc_tensor& q,
              const kvc_attention_params& params, const kvc_tensor_mut& out);
  void append_attend(int32_t layer, const kvc_batch& batch, const kvc_tensor& q,
                     const kvc_tensor& k, const kvc_tensor& v, const kvc_attention_params& params,
                     const kvc_tensor_mut& out);

  // The layer argument of compress() that means every layer (kvc_compress's -1).
  static constexpr int32_t kAllLayers = -1;
  // Compresses the given sequences on one layer, or on every layer for kAllLayers.
  void compress(const std::vector<int32_t>& seq_ids, int32_t layer);
  // Statistics of one (sequence, layer, KV head) computed by an engine's own attention.
  void report_stats(int32_t seq_id, int32_t layer, int32_t kv_head, kvc_stat_flags stat,
                    const float* values, int32_t n_values);
  // Peak bytes one sequence holds for a prompt processed in chunks (the last one marked as the
  // prompt's end when `marks_prompt_end`), then `new_tokens` decode steps, under the configured
  // policy.
  size_t estimate_peak_bytes(int32_t prompt_tokens, int32_t chunk_tokens, int32_t new_tokens,
                             bool marks_prompt_end) const;

  kvc_cache_stats stats() const;

 private:
  // The sequences of a batch, resolved and checked, in batch order.
  struct ResolvedBatch {
    std::vector<Sequence*> sequences;
    std::vector<int32_t> offsets;  // first token row of each sequence
    int32_t total_tokens = 0;
  };

  ResolvedBatch resolve(int32_t layer, const kvc_batch& batch) const;
  // Whether the engine marked sequence i's tokens of the batch as its prompt's last chunk.
  static bool marks_prompt_end(const kvc_batch& batch, size_t i) {
    return batch.prompt_end != nullptr && batch.prompt_end[i] != 0;
  }
  // Refuses a store whose positions do not increase strictly within each sequence, from
  // after the newest position each of its (layer, KV head) stores (cache_positions.cpp).
  void check_positions(int32_t layer, const kvc_batch& batch, const ResolvedBatch& resolved) const;
  // Checks a batch's tensors of `tokens` rows.
  // `storage`: the format of the rows t is stored as (K's for q and k, V's for v).
  void check_input(const kvc_tensor& t, kvc_dtype storage, int32_t heads, int32_t tokens,
                   const char* what) const;
  void check_extent(const char* what, size_t row_stride, size_t row, size_t element,
                    int32_t tokens) const;
  void check_kv_inputs(const kvc_tensor& k, const kvc_tensor& v, int32_t tokens) const;
  void check_attention_inputs(const kvc_tensor& q, const kvc_attention_params& params,
                              const kvc_tensor_mut& out, int32_t tokens) const;
  // What growth, unsharing or shrinking replaced, in order, and the bytes it copied: keep()
  // gives the old memory up once the call succeeded, undo() puts it back.
  struct Replacements {
    std::vector<std::pair<HeadStore*, Replaced>> entries;
    uint64_t copied = 0;
  };
  void keep(const Replacements& replacements);
  void undo(const Replacements& replacements);
  // Stores the tokens; the returned growth is the caller's to keep or undo.
  Replacements append_locked(int32_t layer, const kvc_batch& batch, const ResolvedBatch& resolved,
                             const kvc_tensor& k, const kvc_tensor& v);
  void attend_locked(int32_t layer, const kvc_batch& batch, const ResolvedBatch& resolved,
                     const kvc_tensor& q, const kvc_attention_params& params,
                     const kvc_tensor_mut& out);
  // Makes room for n_tokens[i] more tokens in each listed store, all or nothing; the caller
  // keeps or undoes what it replaced.
  // Copies and releases are ordered on `stream` (the engine's, or NULL).
  [[nodiscard]] Replacements ensure_room(const std::vector<HeadStore*>& stores,
                                         const std::vector<int32_t>& extra, bool exact,
                                         void* stream = nullptr);
  Replacements apply_growth(const std::vector<HeadStore*>& stores,
                            const std::vector<Growth>& growth, const std::vector<void*>& blocks,
                            const std::vector<void*>& memory, const std::vector<size_t>& sizes,
                            void* stream);
  void compress_locked(const std::vector<Sequence*>& sequences, const std::vector<int32_t>& ids,
                       int32_t first_layer, int32_t end_layer, void* stream);
  // A store's hold on the sequences: shared, or exclusive when it starts with a "once"
  // compression (see OnceCompression).
  struct StoreLock {
    std::shared_lock<std::shared_mutex> shared;
    std::unique_lock<std::shared_mutex> exclusive;
  };
  StoreLock lock_for_store(int32_t layer, const kvc_batch& batch) const;
  // Whether storing the batch on `layer` runs a pending "once" compression first (false for a
  // batch that resolve() would refuse).
  bool once_due(int32_t layer, const kvc_batch& batch) const;
  // The "once" compression a store runs first, open until the store succeeded: the compressed
  // layer's heads as they were, so that a store failing after it (out of memory, the backend,
  // the attention, a later compression) leaves them as they were. It needs the cache
  // exclusively: putting the heads back takes the memory the compression freed.
  struct OnceCompression {
    std::vector<Sequence*> sequences;
    std::vector<std::pair<HeadStore*, HeadSnapshot>> heads;
    uint64_t tokens_stored = 0, tokens_evicted = 0, bytes_copied = 0;  // before it
  };
  // Automatic compression: before storing (the "once" mode) and after attending.
  OnceCompression compress_before_append(int32_t layer, const kvc_batch& batch,
                                         const ResolvedBatch& resolved);
  void commit(OnceCompression& once, int32_t layer);
  void roll_back(OnceCompression& once);
  // The compressions an attention makes due, decided before it runs (it changes no length):
  // the triggers' state after it, written back once those compressions succeeded, and the
  // statistics of the due heads that it is about to add to, put back if one fails.
  struct AfterAttend {
    std::vector<TriggerState> triggers;  // [batch sequence]
    std::vector<Sequence*> due;
    std::vector<int32_t> ids;
    std::vector<std::pair<const HeadStore*, std::vector<unsigned char>>> stats;
  };
  AfterAttend plan_after_attend(int32_t layer, const kvc_batch& batch,
                                const ResolvedBatch& resolved);
  void compress_after_attend(int32_t layer, const ResolvedBatch& resolved, AfterAttend& plan,
                             void* stream);
  // A head's tokens to keep (indices, ascending) and the position of the last of them, which
  // the caller read with the positions it chose them by.
  struct Compaction {
    HeadStore* head;
    const std::vector<int32_t>* kept;
    int32_t newest_position;
  };
  // Moves the kept indices of each head to its front, copying shared segments it writes
  // first; returns the tokens removed. All or nothing.
  uint64_t compact_heads(const std::vector<Compaction>& heads, void* stream);
  // Token slots [first, end) of a head about to be written.
  struct SlotWrite {
    HeadStore* head;
    int32_t first;
    int32_t end;
  };
  // Gives each written segment that other sequences share a private copy; all memory is
  // taken first, so an OUT_OF_MEMORY changes nothing. The caller keeps or undoes the copies.
  Replacements unshare_slots(const std::vector<SlotWrite>& writes, void* stream);
  // Shrinks the contiguous segments and statistics arrays that compaction or truncation left
  // mostly empty (the schedule's rule). Best effort: when the memory for the smaller copies is
  // not there, or a copy fails, the stores keep their capacity (logged).
  void release_unused_capacity(const std::vector<HeadStore*>& heads);
  int32_t head_budget(const HeadStore& head) const {
    return schedule_.budget(head.seen(), head.effective_budget());
  }
  HeadStore& store(Sequence& seq, int32_t layer, int32_t kv_head) const {
    return seq.heads[static_cast<size_t>(layer) * config_.kv_heads + kv_head];
  }
  Sequence& find(int32_t seq_id) const;
  void check_head(int32_t layer, int32_t kv_head) const;
  // The image of a sequence but for its K and V rows (each head's first max_tokens tokens at
  // most), and the segments that hold those rows; the caller holds sequences_mutex_.
  SequenceImage image_without_rows(const Sequence& sequence, size_t max_tokens,
                                   std::vector<std::vector<kvc_segment>>& segments);
  // A head's K and V rows from its segments into k and v, in order.
  void copy_rows(const std::vector<kvc_segment>& segments, uint8_t* k, uint8_t* v);
  // The encoded size of a sequence's image, from its heads' lengths; the encoding itself, the
  // rows copied from storage straight into `out`. The caller holds sequences_mutex_.
  size_t encoded_size_of(const Sequence& sequence) const;
  size_t encode_sequence(const Sequence& sequence, uint8_t* out, size_t capacity);

  Context& context_;
  CacheConfig config_;
  std::unique_ptr<Policy> policy_;  // NULL: never compresses
  Schedule schedule_;
  Geometry geometry_;
  Backend backend_;
  BlockPool pool_;
  mutable std::shared_mutex sequences_mutex_;
  std::unordered_map<int32_t, std::unique_ptr<Sequence>> sequences_;
  std::atomic<uint64_t> tokens_stored_{0};
  std::atomic<uint64_t> tokens_evicted_{0};
  std::atomic<uint64_t> bytes_copied_{0};
};

}  // namespace kvc
