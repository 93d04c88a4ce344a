// Which tokens of one (sequence, layer, KV head) survive compression.
#pragma once

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

}  // namespace kvc
