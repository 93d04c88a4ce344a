// Which tokens of one (sequence, layer, KV head) survive compression.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "schedule.hpp"

namespace kvc {

// Indices, increasing, of the tokens to keep out of n: the protected range always, then the
// highest-scored others until `budget` are kept in all (ties go to the later token; NaN
// scores rank lowest). Keeps all n when n <= budget, and only the protected tokens when they
// alone reach the budget; the count is Schedule::kept(n, budget).
std::vector<int32_t> select_kept(const float* scores, int32_t n, int32_t budget,
                                 ProtectedRange range);

// What a compression that demotes (policy.demote) does with one token.
enum class Fate : uint8_t {
  evict,
  keep,    // stays in the cache's formats
  demote,  // goes to, or stays in, the demoted tier
};

// Bytes one token takes in the cache's formats and in the demoted ones.
struct TierCosts {
  size_t keep;
  size_t demoted;
};

// The fate of each of n tokens, in position order (demoted[i] nonzero: token i already is in
// the demoted tier), under a byte budget. Nothing changes when the tokens already fit. Else
// the protected range comes first (kept, or left demoted, even past the budget), then the
// others by score (ties go to the later token; NaN scores rank lowest): a token in the cache's
// formats is kept while the kept tokens take at most `keep_bytes`, and otherwise demoted while
// all fit in `budget_bytes`; what no longer fits is evicted. A demoted token is never kept
// again: its precision is gone.
std::vector<Fate> select_tiers(const float* scores, const uint8_t* demoted, int32_t n,
                               size_t budget_bytes, size_t keep_bytes, TierCosts costs,
                               ProtectedRange range);

// The bytes of a head's budget that tokens in the cache's formats may take (policy.demote's
// `keep` share of `budget_bytes`).
size_t keep_share_bytes(double keep, size_t budget_bytes);

// How many tokens select_tiers leaves in each tier of a head of n tokens (`demoted` of them
// demoted, none of them protected) when every token it keeps scores above every one it
// demotes: the peak estimate's model of a compression.
struct TierCounts {
  int64_t kept;
  int64_t demoted;
};
TierCounts modelled_tiers(int64_t n, int64_t demoted, int64_t protected_count,
                          size_t budget_bytes, size_t keep_bytes, TierCosts costs);

}  // namespace kvc
