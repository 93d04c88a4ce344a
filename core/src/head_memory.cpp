#include "head_memory.hpp"

#include "kvcache/kvcache_error.hpp"

namespace kvc {

Replacements HeadMemory::ensure_room(const std::vector<HeadStorage*>& targets,
                                     const std::vector<int32_t>& extra, bool exact,
                                     void* stream) {
  auto plan = [&](bool exact_growth, std::vector<Growth>& growth, size_t& blocks,
                  std::vector<size_t>& sizes) {
    growth.resize(targets.size());
    blocks = 0;
    sizes.clear();
    for (size_t i = 0; i < targets.size(); ++i) {
      growth[i] = targets[i]->growth_for(extra[i], geometry_, schedule_, exact_growth, pool_);
      blocks += growth[i].blocks + (growth[i].unshare_open_block ? 1 : 0);
      if (growth[i].segment_capacity > 0) sizes.push_back(geometry_.bytes_for(growth[i].segment_capacity));
      if (growth[i].stats_capacity > 0) sizes.push_back(geometry_.stats_bytes_for(growth[i].stats_capacity));
    }
  };
  std::vector<Growth> growth;
  size_t n_blocks = 0;
  std::vector<size_t> sizes;
  plan(exact, growth, n_blocks, sizes);
  if (n_blocks == 0 && sizes.empty()) return {};
  BlockPool::Taken taken;
  try {
    taken = pool_.take(n_blocks, sizes);
  } catch (const Error& e) {
    if (e.code() != KVC_ERR_OUT_OF_MEMORY) throw;
    // Growth by the factor, or the copy of an open block that only the prefix cache shares,
    // does not fit: grow only as much as needed, writing such blocks in place.
    std::vector<const void*> open_blocks;
    for (size_t i = 0; i < targets.size(); ++i) {
      if (!growth[i].unshare_open_block) continue;
      open_blocks.push_back(targets[i]->segments()[targets[i]->open_segment(geometry_)].base);
    }
    if (!pool_.give_up_holds(open_blocks) && exact) throw;
    plan(true, growth, n_blocks, sizes);
    taken = pool_.take(n_blocks, sizes);
  }
  return apply_growth(targets, growth, taken.blocks, taken.memory, sizes, stream);
}

void HeadMemory::keep(const Replacements& replacements) {
  for (const auto& [head, replaced] : replacements.entries) {
    head->release_replaced(replaced, pool_, geometry_);
  }
  counters_.bytes_copied += replacements.copied;
}

void HeadMemory::undo(const Replacements& replacements) {
  for (auto it = replacements.entries.rbegin(); it != replacements.entries.rend(); ++it) {
    it->first->restore(it->second, pool_, geometry_);
  }
}

// Hands the taken memory to the targets: blocks that unshare an open block first, then new
// blocks, then contiguous segments and statistics arrays in target order. A failed copy leaves
// every target as it was, and releases the memory not yet handed over.
Replacements HeadMemory::apply_growth(const std::vector<HeadStorage*>& targets,
                                      const std::vector<Growth>& growth,
                                      const std::vector<void*>& blocks,
                                      const std::vector<void*>& memory,
                                      const std::vector<size_t>& sizes, void* stream) {
  size_t n_unshare = 0;
  for (const Growth& g : growth) n_unshare += g.unshare_open_block ? 1 : 0;
  size_t next_block = n_unshare;
  for (size_t i = 0; i < targets.size(); ++i) {
    targets[i]->add_blocks(blocks.data() + next_block, growth[i].blocks, geometry_);
    next_block += growth[i].blocks;
  }
  Replacements done;
  size_t next_unshare = 0, next = 0;
  try {
    for (size_t i = 0; i < targets.size(); ++i) {
      if (growth[i].unshare_open_block) {
        void* target = blocks[next_unshare++];
        const size_t open = targets[i]->open_segment(geometry_);
        done.entries.emplace_back(targets[i],
                                  targets[i]->unshare(open, target, backend_, pool_, geometry_,
                                                      stream));
      }
      if (growth[i].segment_capacity > 0 || growth[i].stats_capacity > 0) {
        done.entries.emplace_back(targets[i], Replaced{});
        Replaced& replaced = done.entries.back().second;
        replaced.stream = stream;
        if (growth[i].segment_capacity > 0) {
          void* target = memory[next++];
          done.copied += targets[i]->move_segment_to(target, growth[i].segment_capacity, backend_,
                                                     pool_, geometry_, replaced);
        }
        if (growth[i].stats_capacity > 0) {
          void* target = memory[next++];
          done.copied += targets[i]->move_stats_to(target, growth[i].stats_capacity, backend_,
                                                   pool_, geometry_, replaced);
        }
      }
    }
  } catch (...) {
    // The failing step released its own target; release the ones after it, and the blocks.
    for (; next_unshare < n_unshare; ++next_unshare) pool_.give_back_block(blocks[next_unshare]);
    for (; next < memory.size(); ++next) pool_.release(memory[next], sizes[next], stream);
    undo(done);
    for (HeadStorage* target : targets) target->release_empty_blocks(pool_, geometry_);
    throw;
  }
  return done;
}

Replacements HeadMemory::unshare_slots(const std::vector<SlotWrite>& writes, void* stream) {
  std::vector<std::pair<HeadStorage*, size_t>> targets;
  std::vector<size_t> sizes;
  for (const SlotWrite& w : writes) {
    for (size_t index : w.head->shared_segments(w.first, w.end, pool_)) {
      targets.emplace_back(w.head, index);
      sizes.push_back(geometry_.bytes_for(w.head->segments()[index].capacity));
    }
  }
  if (targets.empty()) return {};
  const bool paged = geometry_.layout == KVC_LAYOUT_PAGED;
  std::vector<void*> memory;
  try {
    memory = paged ? pool_.take_blocks(targets.size()) : pool_.allocate(sizes);
  } catch (const Error& e) {
    // The copies do not fit: segments that only the prefix cache shares are written in place.
    std::vector<const void*> bases;
    for (const auto& [head, index] : targets) bases.push_back(head->segments()[index].base);
    if (e.code() != KVC_ERR_OUT_OF_MEMORY || !pool_.give_up_holds(bases)) throw;
    return unshare_slots(writes, stream);
  }
  Replacements done;
  size_t used = 0;
  try {
    for (; used < targets.size(); ++used) {
      HeadStorage* head = targets[used].first;
      done.entries.emplace_back(
          head, head->unshare(targets[used].second, memory[used], backend_, pool_, geometry_,
                              stream));
    }
  } catch (...) {
    // The failing unshare released its own target.
    for (++used; used < targets.size(); ++used) {
      if (paged) {
        pool_.give_back_block(memory[used]);
      } else {
        pool_.release(memory[used], sizes[used], stream);
      }
    }
    undo(done);
    throw;
  }
  return done;
}

void HeadMemory::release_unused_capacity(const std::vector<HeadStorage*>& heads) {
  struct Shrink {
    HeadStorage* head;
    int32_t segment;  // new capacity, 0: keep
    int32_t stats;
  };
  std::vector<Shrink> shrinks;
  std::vector<size_t> sizes;
  for (HeadStorage* head : heads) {
    Shrink s{head, 0, 0};
    if (geometry_.layout == KVC_LAYOUT_CONTIGUOUS) {
      s.segment = schedule_.shrunk_capacity(head->segment_capacity(), head->length());
    }
    if (geometry_.stat_count() > 0) s.stats = schedule_.shrunk_capacity(head->stats_capacity(), head->length());
    if (s.segment == 0 && s.stats == 0) continue;
    if (s.segment > 0) sizes.push_back(geometry_.bytes_for(s.segment));
    if (s.stats > 0) sizes.push_back(geometry_.stats_bytes_for(s.stats));
    shrinks.push_back(s);
  }
  if (shrinks.empty()) return;
  std::vector<void*> memory;
  try {
    memory = pool_.allocate(sizes);
  } catch (const Error& e) {
    logger_.log(KVC_LOG_DEBUG, std::string("keeping unused capacity: ") + e.what());
    return;
  }
  size_t next = 0;
  for (const Shrink& s : shrinks) {
    void* segment = s.segment > 0 ? memory[next++] : nullptr;
    void* stats = s.stats > 0 ? memory[next++] : nullptr;
    Replacements moved;
    moved.entries.emplace_back(s.head, Replaced{});
    Replaced& replaced = moved.entries.back().second;
    bool segment_done = false;
    try {
      if (segment) {
        moved.copied += s.head->move_segment_to(segment, s.segment, backend_, pool_, geometry_,
                                                replaced);
      }
      segment_done = true;
      if (stats) {
        moved.copied += s.head->move_stats_to(stats, s.stats, backend_, pool_, geometry_, replaced);
      }
      keep(moved);
    } catch (const Error& e) {
      // The failed move released its own target: put back what moved, release what did not.
      undo(moved);
      if (!segment_done && stats) pool_.release(stats, geometry_.stats_bytes_for(s.stats));
      logger_.log(KVC_LOG_WARN, std::string("keeping unused capacity: ") + e.what());
    }
  }
}

}  // namespace kvc
