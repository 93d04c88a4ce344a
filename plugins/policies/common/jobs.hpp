// Checks of what the host hands a policy, and the host's selection rule where a policy that
// sets budgets needs it.
#pragma once

#include <cstddef>
#include <cstdint>
#include <limits>

#include "kvcache/kvcache_plugin.h"

namespace kvc::policies {

// Throws KVC_ERR_INVALID_ARGUMENT unless job `index` has scores, positions and every
// statistic in `stats` (a kvc_stat_flags mask) for its n_tokens >= 0 tokens.
void check_job(const kvc_score_job& job, size_t index, uint32_t stats);

// The tokens the host protects in a head (its sink_end and recent_begin): sinks [0, head_end)
// and the recent window [tail_begin, n); candidates are [head_end, tail_begin). Throws
// KVC_ERR_PLUGIN for a host older than plugin ABI 1.1, which does not hand the range over.
struct ProtectedRange {
  int32_t head_end;
  int32_t tail_begin;
  int32_t candidates() const { return tail_begin - head_end; }
};
ProtectedRange protected_range(const kvc_score_job& job);

// Ranking key the host uses: NaN ranks lowest.
inline float rank_of(float score) {
  return score != score ? -std::numeric_limits<float>::infinity() : score;
}

}  // namespace kvc::policies
