// A host copy of one (sequence, layer, KV head), taken before a change that the call must be
// able to undo when a later step fails (the "once" compression before an append).
#pragma once

#include <cstdint>
#include <vector>

#include "head_storage.hpp"

namespace kvc {

struct HeadSnapshot {
  struct Part {
    Segment segment;
    bool held;                         // shared with other sequences: held, not copied
    std::vector<unsigned char> bytes;  // K, V and positions of the whole capacity
  };
  std::vector<Part> parts;
  std::vector<unsigned char> stats;  // the statistics array, stats_capacity long
  int32_t stats_capacity = 0;
  int32_t length = 0;
  int32_t newest_position = -1;
  int64_t seen = 0;
  int32_t effective_budget = -1;
};

// Copies `head` to the host. A segment other sequences share is not copied (nothing writes
// it in place): the snapshot holds it as one more owner instead.
HeadSnapshot capture_head(const HeadStorage& head, Backend& backend, BlockPool& pool,
                          const Geometry& g);
// Makes `head` what `snapshot` saw: its memory is released, the same capacities are taken anew
// and the copies written into them; held segments return to it, with the snapshot's ownership.
// Needs the memory it released and nothing else (the caller holds the cache exclusively).
void restore_head(HeadStorage& head, HeadSnapshot& snapshot, Backend& backend, BlockPool& pool,
                  const Geometry& g);
// Gives up a snapshot no longer needed: its held segments lose the snapshot's ownership.
void release_snapshot(HeadSnapshot& snapshot, BlockPool& pool, const Geometry& g);

}  // namespace kvc
