// A kvc_cache: the façade the C layer calls, and the batched data path (append, attend and
// the checks of their inputs) running on a backend plugin. Its parts: the sequences
// (sequence_table.hpp), changes to their heads' memory (head_memory.hpp) and compression
// (compressor.hpp).
#pragma once

#include <cstdint>
#include <iterator>
#include <limits>
#include <memory>
#include <mutex>
#include <optional>
#include <shared_mutex>
#include <vector>

#include "backend.hpp"
#include "block_pool.hpp"
#include "cache_counters.hpp"
#include "compressor.hpp"
#include "config.hpp"
#include "context.hpp"
#include "head_memory.hpp"
#include "head_storage.hpp"
#include "kvcache_support/large_bytes.hpp"
#include "policy.hpp"
#include "prefix_index.hpp"
#include "prefix_keys.hpp"
#include "schedule.hpp"
#include "sequence_image.hpp"
#include "sequence_table.hpp"
#include "store.hpp"

namespace kvc {

class Cache {
 public:
  Cache(Context& context, const CacheConfig& config, const std::optional<PolicyConfig>& policy);
  Cache(const Cache&) = delete;
  Cache& operator=(const Cache&) = delete;

  const CacheConfig& config() const { return config_; }
  // The stream of every backend call that names none (kvc_cache_set_stream); the caller has
  // the cache to itself.
  void set_stream(void* stream) { backend_.set_default_stream(stream); }
  Context& context() const { return context_; }
  // The attention statistics stored per token (kvc_stat_flags), which an export carries.
  uint32_t stored_stats() const { return geometry_.stats; }

  void create_sequence(int32_t seq_id);
  // Throws what creating sequence `seq_id` now would: INVALID_ARGUMENT for a negative id,
  // ALREADY_EXISTS for one in use (for calls that check before slow work, such as a store's).
  void check_new_sequence_id(int32_t seq_id) const;
  // With `unchanged_since`: only if no call took the sequence to change it since
  // export_bytes() reported that count; INVALID_ARGUMENT (and the sequence kept) otherwise.
  void remove_sequence(int32_t seq_id, std::optional<uint64_t> unchanged_since = std::nullopt);
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
  // encode(export_sequence(seq_id)) the same way, in a new buffer (std::bad_alloc when none),
  // with `offload_version` in the image (0: none); `out_changes`, when given, receives the
  // sequence's count of changes it encoded.
  support::LargeBytes export_bytes(int32_t seq_id, uint64_t offload_version = 0,
                                   uint64_t* out_changes = nullptr);
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

  // What besides token ids decides whether this cache may share a prefix chunk.
  PrefixIdentity prefix_identity(const std::string& model, int32_t chunk_tokens) const;
  // The prefix cache (kvcache.h, "prefix cache"; cache_prefix.cpp): each UNSUPPORTED in a cache
  // without one, and returns tokens. The request's chunk_tokens is not read.
  int32_t attach_prefix(int32_t seq_id, const PrefixRequest& prefix);
  int32_t publish_prefix(int32_t seq_id, const PrefixRequest& prefix);
  int32_t lookup_prefix(const PrefixRequest& prefix);

 private:
  PrefixIndex& prefix_index() const;
  // The links of the prefix's whole blocks, at most `max_blocks`; `keys` holds their keys.
  std::vector<PrefixLink> prefix_links(const PrefixRequest& prefix, size_t max_blocks) const;
  // A chunk read from the prefix store: its image, whose rows may lie in its bytes.
  struct LoadedChunk {
    StoredValue bytes;
    SequenceImage image;
  };
  // The chunks of `links` from `first` on found in the prefix store, in turn, each checked; the
  // caller holds no lock.
  std::vector<LoadedChunk> load_prefix_chunks(const std::vector<PrefixLink>& links, size_t first,
                                              const std::string& model) const;
  // Blocks holding the loaded chunks' rows, [chunk][head]; all or nothing.
  std::vector<std::vector<void*>> store_prefix_chunks(const std::vector<LoadedChunk>& chunks);
  // A new sequence made of these full blocks ([block][head], each already owned for it), with
  // zero statistics; on failure it gives them back.
  std::unique_ptr<Sequence> sequence_of_blocks(const std::vector<std::vector<void*>>& blocks);
  // The tokens a head holds at indices 0, 1, ... with positions 0, 1, ...
  int32_t in_order_tokens(const HeadStorage& head);

  ResolvedBatch resolve(int32_t layer, const kvc_batch& batch) const;
  // Refuses an append whose positions do not increase strictly within each sequence, from
  // after the newest position each of its (layer, KV head) heads holds (cache_positions.cpp).
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
  // Stores the tokens; the returned growth is the caller's to keep or undo.
  Replacements append_locked(int32_t layer, const kvc_batch& batch, const ResolvedBatch& resolved,
                             const kvc_tensor& k, const kvc_tensor& v);
  void attend_locked(int32_t layer, const kvc_batch& batch, const ResolvedBatch& resolved,
                     const kvc_tensor& q, const kvc_attention_params& params,
                     const kvc_tensor_mut& out);
  // An append's hold on the sequences: shared with the batch's sequences locked, or exclusive
  // when it starts with a "once" compression (see Compressor::OnceCompression). Released in
  // reverse.
  struct AppendLock {
    std::shared_lock<std::shared_mutex> shared;
    std::unique_lock<std::shared_mutex> exclusive;
    SequenceTable::SequenceLocks sequences;
  };
  AppendLock lock_for_append(int32_t layer, const kvc_batch& batch) const;
  HeadStorage& storage(Sequence& seq, int32_t layer, int32_t kv_head) const {
    return sequences_.head(seq, layer, kv_head);
  }
  void check_head(int32_t layer, int32_t kv_head) const;
  // The image of a sequence but for its K and V rows (each head's first max_tokens tokens at
  // most), and the segments that hold those rows; the caller holds the sequences' lock and
  // the sequence's.
  SequenceImage image_without_rows(const Sequence& sequence, size_t max_tokens,
                                   std::vector<std::vector<kvc_segment>>& segments);
  // A head's K and V rows from its segments into k and v, in order, each segment's of its
  // tier's formats.
  void copy_rows(const std::vector<kvc_segment>& segments, uint8_t* k, uint8_t* v);
  // The formats of this cache's demoted tiers (when it demotes).
  DemotedFormats demoted_formats() const;
  // Refuses (UNSUPPORTED) an image whose demoted tiers are not of this cache's demoted formats.
  void check_demoted_formats(const DemotedFormats& image) const;
  // The encoded size of a sequence's image, from its heads' lengths; the encoding itself, the
  // rows copied from storage straight into `out`. The caller holds the sequences' lock and the
  // sequence's.
  size_t encoded_size_of(const Sequence& sequence, uint64_t offload_version = 0) const;
  size_t encode_sequence(const Sequence& sequence, uint8_t* out, size_t capacity,
                         uint64_t offload_version = 0);

  Context& context_;
  CacheConfig config_;
  std::unique_ptr<Policy> policy_;  // NULL: never compresses
  Schedule schedule_;
  Geometry geometry_;
  Backend backend_;
  BlockPool pool_;
  CacheCounters counters_;
  SequenceTable sequences_;  // destroyed before the pool, to which it gives its memory back
  HeadMemory memory_;
  Compressor compressor_;
  std::unique_ptr<PrefixIndex> prefix_index_;  // NULL: no prefix cache; holds pool blocks
};

}  // namespace kvc
