// A head rewritten into new blocks by a compression that demotes (policy.demote): the tokens
// it keeps, the demoted tier first, each tier in position order, the rows converted by the
// backend from the stored ones (never from the engine's), the positions and statistics
// written from the host copies the compression read.
#pragma once

#include <cstdint>
#include <vector>

#include "backend.hpp"
#include "block_pool.hpp"
#include "head_storage.hpp"

namespace kvc {

// Tokens are named by their index in position order, which `order` maps to storage order.
struct TierPlan {
  HeadStorage* head;
  std::vector<int32_t> demoted;  // the new demoted tier, increasing
  std::vector<int32_t> kept;     // the tokens that stay in the cache's formats, increasing
  const std::vector<int32_t>* order;      // [token] its storage index; empty: the same
  const std::vector<int32_t>* positions;  // [token]
  // [kStoredStats' index][token]; empty where that statistic is not tracked.
  const std::vector<float>* stats;
};

// The new storage of every planned head, written but not yet theirs: the memory is taken
// first (OUT_OF_MEMORY), then the rows are converted and the positions and statistics
// written; a failure there gives the new memory back. The heads stay as they were until
// commit(), which gives each one its new segments and gives the old ones back (a block forked
// sequences share stays theirs). Destroyed without commit(), it gives the new memory back.
class HeadRewrite {
 public:
  HeadRewrite(const std::vector<TierPlan>& plans, Backend& backend, BlockPool& pool,
              const Geometry& g, void* stream);
  ~HeadRewrite();
  HeadRewrite(const HeadRewrite&) = delete;
  HeadRewrite& operator=(const HeadRewrite&) = delete;
  void commit();

 private:
  void give_back();

  const std::vector<TierPlan>& plans_;
  BlockPool& pool_;
  const Geometry& g_;
  void* stream_;
  BlockPool::Taken taken_;
  std::vector<size_t> sizes_;
  std::vector<std::vector<Segment>> segments_;  // [plan]
  std::vector<float*> stats_;
  std::vector<int32_t> newest_;
  bool committed_ = false;
};

// Rewrites every planned head at once (HeadRewrite, committed), all or nothing: the memory is taken first (OUT_OF_MEMORY), then
// the rows are converted and the positions and statistics written; a failure there gives the
// new memory back. Every head is left as it was until all succeeded; then each gives its old
// blocks and statistics back (a block forked sequences share stays theirs).
void rebuild_heads(const std::vector<TierPlan>& plans, Backend& backend, BlockPool& pool,
                   const Geometry& g, void* stream);

}  // namespace kvc
