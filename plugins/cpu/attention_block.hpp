// The online-softmax pass of attention for a block of query tokens of one job.
#pragma once

#include <cstddef>
#include <vector>

#include "attention_tiles.hpp"
#include "kvcache/kvcache_plugin.h"

namespace kvc::cpu {

// Scratch of one thread, reused across blocks. After attend_block it describes that block:
// the statistics pass reads its queries and softmax state.
struct AttentionWorkspace {
  explicit AttentionWorkspace(const AttentionShape& s);

  size_t first_query = 0;              // of the block, within the job
  size_t n_queries = 0;
  VisibleRange block_visible{};        // union of the block's visible ranges
  std::vector<VisibleRange> visible;   // [queries_per_block]
  std::vector<float> q;                // [rows, head_dim]; a row is (query, group head)
  std::vector<float> acc;              // [rows, head_dim], unnormalised output
  std::vector<float> row_max;          // [rows], running max logit
  std::vector<float> row_sum;          // [rows], softmax denominator relative to row_max
  std::vector<float> logits;           // [kTileKeys], of the row being updated
  std::vector<float> weights;          // [kTileKeys], exp(logit - row_max) of the keys seen
  std::vector<const float*> values;    // [kTileKeys], their V rows
  std::vector<float> k;                // [kTileKeys, head_dim], converted tile
  std::vector<float> v;
};

// Attention of queries [first, first + count) of the job (count <= queries_per_block):
// writes their output rows and leaves their softmax state in the workspace.
void attend_block(const kvc_attend_job& job, size_t first, size_t count,
                  const AttentionShape& s, AttentionWorkspace& w);

}  // namespace kvc::cpu
