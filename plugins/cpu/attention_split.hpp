// Split-K: when a call has too few query blocks to keep every core busy (one sequence
// decoding with few KV heads), blocks are also split across ranges of keys. Each part leaves
// a partial softmax state; the merge combines the parts of a block and writes its output.
#pragma once

#include <cstddef>
#include <vector>

#include "attention_block.hpp"
#include "kvcache/kvcache_plugin.h"

namespace kvc::cpu {

class PartialStates {
 public:
  // Room for n_parts states of up to `rows` rows each.
  PartialStates(size_t n_parts, size_t rows, const AttentionShape& s);

  // Keeps the state of the block last passed to attend_block as part `index`.
  void save(size_t index, const AttentionWorkspace& w);

  // Combines parts [first, first + n) of queries [first_query, first_query + n_queries) of
  // the job and writes their output rows.
  void merge(const kvc_attend_job& job, size_t first_query, size_t n_queries, size_t first,
             size_t n, const AttentionShape& s) const;

 private:
  size_t rows_;  // per part
  size_t dim_;
  std::vector<float> acc_;
  std::vector<float> max_;
  std::vector<float> sum_;
};

}  // namespace kvc::cpu
