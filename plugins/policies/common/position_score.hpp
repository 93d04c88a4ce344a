// score = position, for window and streaming.
#pragma once

#include <cstddef>

#include "kvcache/kvcache_plugin.h"

namespace kvc::policies {

// Positions above 2^24 round to nearby floats; equal scores are then broken by the host
// toward later tokens, which are the higher positions, so the ranking stays by position.
void score_by_position(const kvc_score_job* jobs, size_t n_jobs);

}  // namespace kvc::policies
