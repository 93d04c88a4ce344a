// Sequence operations: fork (sharing K/V blocks), truncate and remove a range of positions.
#include <algorithm>
#include <iterator>
#include <memory>
#include <mutex>

#include "cache.hpp"
#include "head_rebuild.hpp"
#include "kvcache/kvcache_error.hpp"

namespace kvc {

void Cache::fork_sequence(int32_t source_id, int32_t target_id) {
  sequences_.fork(source_id, target_id);
}

void Cache::remove_positions(int32_t seq_id, int32_t first, int32_t end) {
  if (first < 0 || end < first) {
    throw Error(KVC_ERR_INVALID_ARGUMENT, "positions [" + std::to_string(first) + ", " +
                                              std::to_string(end) + ") are not a range >= 0");
  }
  std::shared_lock<std::shared_mutex> lock(sequences_.mutex());
  Sequence& sequence = sequences_.find(seq_id);
  const auto sequence_lock = SequenceTable::lock_sequence(sequence, true);

  // Every head's positions, in one batched read; with demotion the statistics too, which a
  // rewritten head takes along.
  const bool demotes = geometry_.demotes();
  using Stats = std::vector<float>[std::size(kStoredStats)];
  std::vector<std::vector<int32_t>> positions(sequence.heads.size());
  std::unique_ptr<Stats[]> stats(new Stats[sequence.heads.size()]);
  std::vector<std::vector<kvc_segment>> segments(sequence.heads.size());
  std::vector<kvc_read_tokens_job> reads;
  for (size_t i = 0; i < sequence.heads.size(); ++i) {
    const HeadStorage& head = sequence.heads[i];
    if (head.length() == 0) continue;
    positions[i].resize(static_cast<size_t>(head.length()));
    head.gather(segments[i], geometry_);
    kvc_read_tokens_job job{};
    job.struct_size = sizeof(job);
    job.n_segments = static_cast<int32_t>(segments[i].size());
    job.segments = segments[i].data();
    job.out_pos = positions[i].data();
    if (demotes) {
      job.stats = head.stats(geometry_);
      float** outs[] = {&job.out_attn_sum, &job.out_attn_last, &job.out_attn_window};
      for (size_t s = 0; s < std::size(kStoredStats); ++s) {
        if (!(geometry_.stats & kStoredStats[s])) continue;
        stats[i][s].resize(positions[i].size());
        *outs[s] = stats[i][s].data();
      }
    }
    reads.push_back(job);
  }
  backend_.read_tokens(reads, nullptr);

  // A head keeps its tokens outside [first, end): a prefix of its storage is a truncation
  // (counts only); anything else a compaction, or, for a head with a demoted tier, a rewrite
  // that keeps each token's tier. The rewrite is prepared first and made the heads' last, so
  // that a failure anywhere leaves every head as it was.
  const std::vector<int32_t> storage_order;  // the rewrite names tokens by storage index
  std::vector<std::vector<int32_t>> kept(sequence.heads.size());
  std::vector<Compressor::Compaction> compactions;
  std::vector<Compressor::Compaction> truncations;
  std::vector<TierPlan> rewrites;
  for (size_t i = 0; i < sequence.heads.size(); ++i) {
    HeadStorage& head = sequence.heads[i];
    const std::vector<int32_t>& pos = positions[i];
    int32_t newest = -1;
    for (int32_t t = 0; t < head.length(); ++t) {
      const int32_t p = pos[static_cast<size_t>(t)];
      if (p >= first && p < end) continue;
      kept[i].push_back(t);
      newest = std::max(newest, p);
    }
    const int32_t n_keep = static_cast<int32_t>(kept[i].size());
    if (n_keep == head.length()) continue;
    const bool prefix = n_keep == 0 || kept[i].back() == n_keep - 1;
    if (!prefix && head.demoted_length() > 0) {
      TierPlan plan{&head, {}, {}, &storage_order, &positions[i], stats[i]};
      for (int32_t t : kept[i]) (t < head.demoted_length() ? plan.demoted : plan.kept).push_back(t);
      rewrites.push_back(std::move(plan));
      continue;
    }
    (prefix ? truncations : compactions).push_back(Compressor::Compaction{&head, &kept[i], newest});
  }
  HeadRewrite rewrite(rewrites, backend_, pool_, geometry_, nullptr);
  compressor_.compact_heads(compactions, nullptr);
  std::vector<HeadStorage*> changed;
  for (const Compressor::Compaction& c : compactions) changed.push_back(c.head);
  for (const TierPlan& plan : rewrites) {
    counters_.tokens_stored -= static_cast<uint64_t>(plan.head->length()) - plan.demoted.size() - plan.kept.size();
    changed.push_back(plan.head);
  }
  rewrite.commit();
  for (const auto& [head, kept_indices, newest] : truncations) {
    const int32_t n_keep = static_cast<int32_t>(kept_indices->size());
    counters_.tokens_stored -= static_cast<uint64_t>(head->length() - n_keep);
    head->truncate(n_keep, newest, pool_, geometry_);
    changed.push_back(head);
  }
  memory_.release_unused_capacity(changed);
  // The removed tokens are as if never appended: ratio budgets follow what is left.
  for (size_t i = 0; i < sequence.heads.size(); ++i) {
    sequence.heads[i].forget(static_cast<int32_t>(positions[i].size() - kept[i].size()));
  }
}

}  // namespace kvc
