#include "sequence_table.hpp"

#include <algorithm>
#include <mutex>
#include <string>

#include "kvcache/kvcache_error.hpp"

namespace kvc {
namespace {

Error already_exists(int32_t seq_id) {
  return Error(KVC_ERR_ALREADY_EXISTS, "sequence " + std::to_string(seq_id) + " already exists");
}

}  // namespace

SequenceTable::SequenceTable(Backend& backend, BlockPool& pool, const Geometry& geometry,
                             int32_t layers, int32_t kv_heads, CacheCounters& counters)
    : backend_(backend),
      pool_(pool),
      geometry_(geometry),
      layers_(layers),
      kv_heads_(kv_heads),
      counters_(counters) {}

SequenceTable::~SequenceTable() {
  for (auto& entry : sequences_) {
    for (HeadStorage& head : entry.second->heads) head.release_all(pool_, geometry_);
  }
}

void SequenceTable::check_id(int32_t seq_id) {
  if (seq_id < 0) {
    throw Error(KVC_ERR_INVALID_ARGUMENT, "sequence ids must be >= 0, got " + std::to_string(seq_id));
  }
}

Sequence& SequenceTable::find(int32_t seq_id) const {
  Sequence* sequence = lookup(seq_id);
  if (!sequence) {
    throw Error(KVC_ERR_NOT_FOUND, "sequence " + std::to_string(seq_id) + " does not exist");
  }
  return *sequence;
}

Sequence* SequenceTable::lookup(int32_t seq_id) const {
  const auto it = sequences_.find(seq_id);
  return it == sequences_.end() ? nullptr : it->second.get();
}

SequenceTable::SequenceLocks SequenceTable::lock_sequences(const int32_t* ids, size_t n,
                                                           bool changes) const {
  SequenceLocks locks;
  if (ids == nullptr) return locks;
  std::vector<int32_t> sorted(ids, ids + n);
  std::sort(sorted.begin(), sorted.end());
  sorted.erase(std::unique(sorted.begin(), sorted.end()), sorted.end());
  locks.reserve(sorted.size());
  for (int32_t id : sorted) {
    if (Sequence* sequence = lookup(id)) locks.push_back(lock_sequence(*sequence, changes));
  }
  return locks;
}

std::unique_lock<std::mutex> SequenceTable::lock_sequence(Sequence& sequence, bool changes) {
  std::unique_lock<std::mutex> lock(sequence.mutex);
  if (changes) ++sequence.changes;
  return lock;
}

void SequenceTable::require_unused(int32_t seq_id) const {
  if (sequences_.count(seq_id)) throw already_exists(seq_id);
}

void SequenceTable::add(int32_t seq_id, std::unique_ptr<Sequence> sequence) {
  uint64_t tokens = 0;
  for (const HeadStorage& head : sequence->heads) tokens += static_cast<uint64_t>(head.length());
  sequences_.emplace(seq_id, std::move(sequence));
  counters_.tokens_stored += tokens;
}

void SequenceTable::check_new_id(int32_t seq_id) const {
  check_id(seq_id);
  std::shared_lock<std::shared_mutex> lock(mutex_);
  require_unused(seq_id);
}

void SequenceTable::create(int32_t seq_id) {
  check_id(seq_id);
  auto sequence = std::make_unique<Sequence>();
  sequence->heads.resize(static_cast<size_t>(layers_) * kv_heads_);
  sequence->triggers.assign(static_cast<size_t>(layers_), TriggerState{});
  std::unique_lock<std::shared_mutex> lock(mutex_);
  if (!sequences_.emplace(seq_id, std::move(sequence)).second) throw already_exists(seq_id);
}

void SequenceTable::remove(int32_t seq_id, std::optional<uint64_t> unchanged_since) {
  std::unique_lock<std::shared_mutex> lock(mutex_);
  Sequence& sequence = find(seq_id);
  if (unchanged_since && sequence.changes != *unchanged_since) {
    throw Error(KVC_ERR_INVALID_ARGUMENT,
                "sequence " + std::to_string(seq_id) +
                    " was changed by another call while it was being offloaded: it is kept, and "
                    "the store holds it as it was before that call");
  }
  for (HeadStorage& head : sequence.heads) {
    counters_.tokens_stored -= static_cast<uint64_t>(head.length());
    head.release_all(pool_, geometry_);
  }
  sequences_.erase(seq_id);
}

void SequenceTable::fork(int32_t source_id, int32_t target_id) {
  check_id(target_id);
  std::unique_lock<std::shared_mutex> lock(mutex_);
  const Sequence& source = find(source_id);
  require_unused(target_id);
  auto target = std::make_unique<Sequence>();
  target->heads.resize(source.heads.size());
  target->triggers = source.triggers;

  // The statistics are each branch's own: all their memory is taken before anything is shared.
  std::vector<size_t> sizes;
  for (const HeadStorage& head : source.heads) {
    if (head.stats_capacity() > 0) sizes.push_back(geometry_.stats_bytes_for(head.stats_capacity()));
  }
  std::vector<void*> memory = pool_.allocate(sizes);
  size_t next = 0;
  try {
    for (size_t i = 0; i < source.heads.size(); ++i) {
      void* stats = source.heads[i].stats_capacity() > 0 ? memory[next++] : nullptr;
      target->heads[i].fork_from(source.heads[i], stats, backend_, pool_, geometry_);
    }
  } catch (...) {
    // The failing head released its own memory; give back what the others took.
    for (; next < memory.size(); ++next) pool_.release(memory[next], sizes[next]);
    for (HeadStorage& head : target->heads) head.release_all(pool_, geometry_);
    throw;
  }
  add(target_id, std::move(target));
}

}  // namespace kvc
