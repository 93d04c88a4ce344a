// Sequence operations: fork (sharing K/V blocks), truncate and remove a range of positions.
#include <algorithm>
#include <mutex>

#include "cache.hpp"
#include "kvcache/kvcache_error.hpp"

namespace kvc {

void Cache::fork_sequence(int32_t source_id, int32_t target_id) {
  if (target_id < 0) {
    throw Error(KVC_ERR_INVALID_ARGUMENT, "sequence ids must be >= 0, got " + std::to_string(target_id));
  }
  std::unique_lock<std::shared_mutex> lock(sequences_mutex_);
  const Sequence& source = find(source_id);
  if (sequences_.count(target_id)) {
    throw Error(KVC_ERR_ALREADY_EXISTS, "sequence " + std::to_string(target_id) + " already exists");
  }
  auto target = std::make_unique<Sequence>();
  target->heads.resize(source.heads.size());
  target->triggers = source.triggers;

  // The statistics are each branch's own: all their memory is taken before anything is shared.
  std::vector<size_t> sizes;
  for (const HeadStore& head : source.heads) {
    if (head.stats_capacity() > 0) sizes.push_back(geometry_.stats_bytes_for(head.stats_capacity()));
  }
  std::vector<void*> memory = pool_.allocate(sizes);
  size_t next = 0;
  uint64_t tokens = 0;
  try {
    for (size_t i = 0; i < source.heads.size(); ++i) {
      void* stats = source.heads[i].stats_capacity() > 0 ? memory[next++] : nullptr;
      target->heads[i].fork_from(source.heads[i], stats, backend_, pool_, geometry_);
      tokens += static_cast<uint64_t>(source.heads[i].length());
    }
  } catch (...) {
    // The failing head released its own memory; give back what the others took.
    for (; next < memory.size(); ++next) pool_.release(memory[next], sizes[next]);
    for (HeadStore& head : target->heads) head.release_all(pool_, geometry_);
    throw;
  }
  sequences_.emplace(target_id, std::move(target));
  tokens_stored_ += tokens;
}

void Cache::remove_positions(int32_t seq_id, int32_t first, int32_t end) {
  if (first < 0 || end < first) {
    throw Error(KVC_ERR_INVALID_ARGUMENT, "positions [" + std::to_string(first) + ", " +
                                              std::to_string(end) + ") are not a range >= 0");
  }
  std::shared_lock<std::shared_mutex> lock(sequences_mutex_);
  Sequence& sequence = find(seq_id);

  // Every head's positions, in one batched read.
  std::vector<std::vector<int32_t>> positions(sequence.heads.size());
  std::vector<std::vector<kvc_segment>> segments(sequence.heads.size());
  std::vector<kvc_read_tokens_job> reads;
  for (size_t i = 0; i < sequence.heads.size(); ++i) {
    const HeadStore& head = sequence.heads[i];
    if (head.length() == 0) continue;
    positions[i].resize(static_cast<size_t>(head.length()));
    head.gather(segments[i], geometry_);
    kvc_read_tokens_job job{};
    job.struct_size = sizeof(job);
    job.n_segments = static_cast<int32_t>(segments[i].size());
    job.segments = segments[i].data();
    job.out_pos = positions[i].data();
    reads.push_back(job);
  }
  backend_.read_tokens(reads, nullptr);

  // A head keeps its tokens outside [first, end): a prefix is a truncation (counts only),
  // anything else a compaction.
  std::vector<std::vector<int32_t>> kept(sequence.heads.size());
  std::vector<Compaction> compactions;
  std::vector<Compaction> truncations;
  for (size_t i = 0; i < sequence.heads.size(); ++i) {
    HeadStore& head = sequence.heads[i];
    const std::vector<int32_t>& pos = positions[i];
    for (int32_t t = 0; t < head.length(); ++t) {
      const int32_t p = pos[static_cast<size_t>(t)];
      if (p < first || p >= end) kept[i].push_back(t);
    }
    const int32_t n_keep = static_cast<int32_t>(kept[i].size());
    if (n_keep == head.length()) continue;
    const int32_t newest = n_keep == 0 ? -1 : pos[static_cast<size_t>(kept[i].back())];
    const bool prefix = n_keep == 0 || kept[i].back() == n_keep - 1;
    (prefix ? truncations : compactions).push_back(Compaction{&head, &kept[i], newest});
  }
  compact_heads(compactions, nullptr);
  std::vector<HeadStore*> changed;
  for (const Compaction& c : compactions) changed.push_back(c.head);
  for (const auto& [head, kept_indices, newest] : truncations) {
    const int32_t n_keep = static_cast<int32_t>(kept_indices->size());
    tokens_stored_ -= static_cast<uint64_t>(head->length() - n_keep);
    head->truncate(n_keep, newest, pool_, geometry_);
    changed.push_back(head);
  }
  release_unused_capacity(changed);
  // The removed tokens are as if never appended: ratio budgets follow what is left.
  for (size_t i = 0; i < sequence.heads.size(); ++i) {
    sequence.heads[i].forget(static_cast<int32_t>(positions[i].size() - kept[i].size()));
  }
}

void Cache::release_unused_capacity(const std::vector<HeadStore*>& heads) {
  struct Shrink {
    HeadStore* head;
    int32_t segment;  // new capacity, 0: keep
    int32_t stats;
  };
  std::vector<Shrink> shrinks;
  std::vector<size_t> sizes;
  for (HeadStore* head : heads) {
    Shrink s{head, 0, 0};
    if (geometry_.layout == KVC_LAYOUT_CONTIGUOUS) {
      s.segment = schedule_.shrunk_capacity(head->segment_capacity(), head->length());
    }
    if (geometry_.stat_count() > 0) s.stats = schedule_.shrunk_capacity(head->stats_capacity(), head->length());
    if (s.segment == 0 && s.stats == 0) continue;
    if (s.segment > 0) sizes.push_back(geometry_.bytes_for(s.segment));
    if (s.stats > 0) sizes.push_back(geometry_.stats_bytes_for(s.stats));
    shrinks.push_back(s);
  }
  if (shrinks.empty()) return;
  std::vector<void*> memory;
  try {
    memory = pool_.allocate(sizes);
  } catch (const Error& e) {
    context_.logger().log(KVC_LOG_DEBUG, std::string("keeping unused capacity: ") + e.what());
    return;
  }
  size_t next = 0;
  for (const Shrink& s : shrinks) {
    void* segment = s.segment > 0 ? memory[next++] : nullptr;
    void* stats = s.stats > 0 ? memory[next++] : nullptr;
    Replacements moved;
    moved.entries.emplace_back(s.head, Replaced{});
    Replaced& replaced = moved.entries.back().second;
    bool segment_done = false;
    try {
      if (segment) {
        moved.copied += s.head->move_segment_to(segment, s.segment, backend_, pool_, geometry_,
                                                replaced);
      }
      segment_done = true;
      if (stats) {
        moved.copied += s.head->move_stats_to(stats, s.stats, backend_, pool_, geometry_, replaced);
      }
      keep(moved);
    } catch (const Error& e) {
      // The failed move released its own target: put back what moved, release what did not.
      undo(moved);
      if (!segment_done && stats) pool_.release(stats, geometry_.stats_bytes_for(s.stats));
      context_.logger().log(KVC_LOG_WARN, std::string("keeping unused capacity: ") + e.what());
    }
  }
}

}  // namespace kvc
