// Per-key attention statistics for eviction policies (see ::kvc_stat_flags), computed from
// the softmax state the online pass leaves behind.
#pragma once

#include "attention_block.hpp"
#include "kvcache/kvcache_plugin.h"

namespace kvc::cpu {

// Which statistics the job carries.
struct StatsRequest {
  bool sum = false;
  bool last = false;
  bool window = false;
  bool any() const { return sum || last || window; }
};

StatsRequest requested_stats(const kvc_attend_job& job);

// Zeroes attn_last and attn_window, which describe only the latest attend.
void reset_latest_stats(const kvc_attend_job& job);

// Whether queries [first, first + count) of the job feed any of the requested statistics.
bool block_feeds_stats(const kvc_attend_job& job, StatsRequest request, size_t first,
                       size_t count, const AttentionShape& s);

// Adds the attention probabilities of the block last passed to attend_block to the job's
// statistics, from the logits attend_block kept (keep_logits_if) or scored again. Blocks of one
// job must be folded in one after the other.
void accumulate_stats(const kvc_attend_job& job, StatsRequest request, const AttentionShape& s,
                      AttentionWorkspace& w);

}  // namespace kvc::cpu
