// The heads of an imported sequence image that holds demoted tiers (policy.demote): each tier
// in blocks of its own formats, the demoted tier first, the rows, positions and statistics
// copied as they are into the blocks' layout.
#pragma once

#include <vector>

#include "backend.hpp"
#include "block_pool.hpp"
#include "head_storage.hpp"
#include "sequence_image.hpp"

namespace kvc {

// Fills the empty `heads` (heads[i] from image.heads[i]) of a paged cache of geometry `g`,
// whose formats are the image's (tier 1: its demoted formats), all or nothing: the blocks and
// statistics arrays are taken first, as one request (OUT_OF_MEMORY), and a failed copy gives
// them back, leaving every head empty.
void build_tiered_heads(const SequenceImage& image, const std::vector<HeadStorage*>& heads,
                        Backend& backend, BlockPool& pool, const Geometry& g);

}  // namespace kvc
