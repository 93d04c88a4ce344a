// Changes to the memory of a cache's heads, each all or nothing: growth (ensure_room),
// private copies of shared segments about to be written (unshare_slots) and shrinking
// (release_unused_capacity). What growth or unsharing replaced is the caller's to keep, once
// its call succeeded, or to undo.
#pragma once

#include <cstdint>
#include <utility>
#include <vector>

#include "backend.hpp"
#include "block_pool.hpp"
#include "cache_counters.hpp"
#include "head_storage.hpp"
#include "logger.hpp"
#include "schedule.hpp"

namespace kvc {

// What growth, unsharing or shrinking replaced, in order, and the bytes it copied: keep()
// gives the old memory up once the call succeeded, undo() puts it back.
struct Replacements {
  std::vector<std::pair<HeadStorage*, Replaced>> entries;
  uint64_t copied = 0;
};

// Token slots [first, end) of a head about to be written.
struct SlotWrite {
  HeadStorage* head;
  int32_t first;
  int32_t end;
};

class HeadMemory {
 public:
  HeadMemory(Backend& backend, BlockPool& pool, const Geometry& geometry,
             const Schedule& schedule, Logger& logger, CacheCounters& counters)
      : backend_(backend),
        pool_(pool),
        geometry_(geometry),
        schedule_(schedule),
        logger_(logger),
        counters_(counters) {}

  // Makes room for extra[i] more tokens in each target, all or nothing (growing by the
  // schedule's factor where that fits, else `exact`ly).
  // Copies and releases are ordered on `stream` (the engine's, or NULL).
  [[nodiscard]] Replacements ensure_room(const std::vector<HeadStorage*>& targets,
                                         const std::vector<int32_t>& extra, bool exact,
                                         void* stream = nullptr);
  // Gives each written segment that other sequences share a private copy; all memory is
  // taken first, so an OUT_OF_MEMORY changes nothing.
  [[nodiscard]] Replacements unshare_slots(const std::vector<SlotWrite>& writes, void* stream);
  // Shrinks the contiguous segments and statistics arrays that compaction or truncation left
  // mostly empty (the schedule's rule). Best effort: when the memory for the smaller copies is
  // not there, or a copy fails, the heads keep their capacity (logged).
  void release_unused_capacity(const std::vector<HeadStorage*>& heads);
  void keep(const Replacements& replacements);
  void undo(const Replacements& replacements);

 private:
  Replacements apply_growth(const std::vector<HeadStorage*>& targets,
                            const std::vector<Growth>& growth, const std::vector<void*>& blocks,
                            const std::vector<void*>& memory, const std::vector<size_t>& sizes,
                            void* stream);

  Backend& backend_;
  BlockPool& pool_;
  const Geometry& geometry_;
  const Schedule& schedule_;
  Logger& logger_;
  CacheCounters& counters_;
};

}  // namespace kvc
