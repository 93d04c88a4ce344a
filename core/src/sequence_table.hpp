// The sequences of a cache by id, behind one mutex: lookup, creation, forking and removal.
#pragma once

#include <cstdint>
#include <memory>
#include <mutex>
#include <optional>
#include <shared_mutex>
#include <unordered_map>
#include <vector>

#include "backend.hpp"
#include "block_pool.hpp"
#include "cache_counters.hpp"
#include "head_storage.hpp"
#include "schedule.hpp"

namespace kvc {

struct Sequence {
  std::vector<HeadStorage> heads;        // [layer * kv_heads + kv_head]
  std::vector<TriggerState> triggers;  // [layer]
  // Serialises the calls on this sequence (SequenceTable::lock_sequences).
  std::mutex mutex;
  // Calls that took it to change it, so far: an offload removes only what it exported.
  uint64_t changes = 0;
};

// The sequences of a batch, resolved and checked (Cache::resolve), in batch order.
struct ResolvedBatch {
  std::vector<Sequence*> sequences;
  std::vector<int32_t> offsets;  // first token row of each sequence
  int32_t total_tokens = 0;
};

class SequenceTable {
 public:
  SequenceTable(Backend& backend, BlockPool& pool, const Geometry& geometry, int32_t layers,
                int32_t kv_heads, CacheCounters& counters);
  // Gives every head's memory back to the pool.
  ~SequenceTable();
  SequenceTable(const SequenceTable&) = delete;
  SequenceTable& operator=(const SequenceTable&) = delete;

  // Held shared to use sequences, exclusively to add or remove one. The members below that
  // do not say they take it expect the caller to hold it.
  std::shared_mutex& mutex() const { return mutex_; }

  // The locks of the sequences a call names. Lock order: mutex() (held, shared or exclusive,
  // for as long as these are), then these in ascending id order; no call waits for mutex()
  // while it holds one, so an exclusive holder of mutex() knows that no other call is inside
  // any sequence.
  using SequenceLocks = std::vector<std::unique_lock<std::mutex>>;
  // Locks each existing sequence among `ids` once, in ascending id order (ids that do not
  // exist are left for find() or resolve() to refuse); `changes` counts a change on each.
  SequenceLocks lock_sequences(const int32_t* ids, size_t n, bool changes) const;
  static std::unique_lock<std::mutex> lock_sequence(Sequence& sequence, bool changes);

  // Throws INVALID_ARGUMENT for a negative sequence id.
  static void check_id(int32_t seq_id);
  // NOT_FOUND when there is no such sequence.
  Sequence& find(int32_t seq_id) const;
  // Null when there is no such sequence.
  Sequence* lookup(int32_t seq_id) const;
  // ALREADY_EXISTS when the id is in use.
  void require_unused(int32_t seq_id) const;
  HeadStorage& head(Sequence& sequence, int32_t layer, int32_t kv_head) const {
    return sequence.heads[static_cast<size_t>(layer) * kv_heads_ + kv_head];
  }
  size_t size() const { return sequences_.size(); }
  // Adds a sequence the caller built, its id checked by require_unused() under the exclusive
  // lock it still holds; its tokens are counted as stored.
  void add(int32_t seq_id, std::unique_ptr<Sequence> sequence);

  // These take the lock.
  // Throws what create(seq_id) would now: INVALID_ARGUMENT or ALREADY_EXISTS.
  void check_new_id(int32_t seq_id) const;
  void create(int32_t seq_id);
  // With `unchanged_since`: only if no call took the sequence to change it since its count of
  // changes was that; INVALID_ARGUMENT (and the sequence kept) otherwise.
  void remove(int32_t seq_id, std::optional<uint64_t> unchanged_since = std::nullopt);
  // A new sequence sharing every K/V block of the source, with its own statistics and counters.
  void fork(int32_t source_id, int32_t target_id);

 private:
  Backend& backend_;
  BlockPool& pool_;
  const Geometry& geometry_;
  const int32_t layers_;
  const int32_t kv_heads_;
  CacheCounters& counters_;
  mutable std::shared_mutex mutex_;
  std::unordered_map<int32_t, std::unique_ptr<Sequence>> sequences_;
};

}  // namespace kvc
