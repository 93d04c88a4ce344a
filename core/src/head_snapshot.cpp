#include "head_snapshot.hpp"

#include <utility>

namespace kvc {
namespace {

// Gives back what restore_head took before it failed.
void release_parts(std::vector<Segment>& taken, BlockPool& pool, const Geometry& g) {
  for (const Segment& s : taken) {
    if (g.layout == KVC_LAYOUT_PAGED) {
      pool.give_back_block(s.base);
    } else {
      pool.release(s.base, segment_bytes(s, g));
    }
  }
}

}  // namespace

HeadSnapshot capture_head(const HeadStorage& head, Backend& backend, BlockPool& pool,
                          const Geometry& g) {
  HeadSnapshot snapshot;
  snapshot.length = head.length();
  snapshot.newest_position = head.newest_position();
  snapshot.seen = head.seen();
  snapshot.effective_budget = head.effective_budget();
  snapshot.stats_capacity = head.stats_capacity();
  for (const Segment& s : head.segments()) {
    // A block only the prefix cache shares is copied: its hold may end and the block be
    // written in place (BlockPool::give_up_holds).
    HeadSnapshot::Part part{s, pool.shared_by_sequences(s.base), {}};
    if (!part.held) {
      part.bytes.resize(segment_bytes(s, g));
      backend.copy(part.bytes.data(), s.base, part.bytes.size(), KVC_COPY_DEVICE_TO_HOST);
    }
    snapshot.parts.push_back(std::move(part));
  }
  if (head.stats_array()) {
    snapshot.stats.resize(g.stats_bytes_for(snapshot.stats_capacity));
    backend.copy(snapshot.stats.data(), head.stats_array(), snapshot.stats.size(),
                 KVC_COPY_DEVICE_TO_HOST);
  }
  // Ownership last: nothing above can fail after it.
  for (const HeadSnapshot::Part& part : snapshot.parts) {
    if (part.held) pool.share(part.segment.base, segment_bytes(part.segment, g));
  }
  return snapshot;
}

void restore_head(HeadStorage& head, HeadSnapshot& snapshot, Backend& backend, BlockPool& pool,
                  const Geometry& g) {
  head.release_all(pool, g);
  std::vector<size_t> sizes;
  size_t blocks = 0;
  for (const HeadSnapshot::Part& part : snapshot.parts) {
    if (part.held) continue;
    if (g.layout == KVC_LAYOUT_PAGED) {
      ++blocks;
    } else {
      sizes.push_back(segment_bytes(part.segment, g));
    }
  }
  if (!snapshot.stats.empty()) sizes.push_back(snapshot.stats.size());
  BlockPool::Taken taken = pool.take(blocks, sizes);
  std::vector<Segment> segments, copies;
  float* stats = nullptr;
  size_t next_block = 0, next_memory = 0;
  try {
    for (HeadSnapshot::Part& part : snapshot.parts) {
      Segment s = part.segment;
      if (!part.held) {
        s.base = static_cast<unsigned char*>(g.layout == KVC_LAYOUT_PAGED
                                                 ? taken.blocks[next_block++]
                                                 : taken.memory[next_memory++]);
        copies.push_back(s);
        backend.copy(s.base, part.bytes.data(), part.bytes.size(), KVC_COPY_HOST_TO_DEVICE);
      }
      segments.push_back(s);
    }
    if (!snapshot.stats.empty()) {
      stats = static_cast<float*>(taken.memory[next_memory++]);
      backend.copy(stats, snapshot.stats.data(), snapshot.stats.size(), KVC_COPY_HOST_TO_DEVICE);
    }
  } catch (...) {
    for (; next_block < taken.blocks.size(); ++next_block) {
      copies.push_back(Segment{static_cast<unsigned char*>(taken.blocks[next_block]), 0, 0});
    }
    release_parts(copies, pool, g);
    for (size_t i = next_memory; i < taken.memory.size(); ++i) pool.release(taken.memory[i], sizes[i]);
    if (stats) pool.release(stats, snapshot.stats.size());
    throw;
  }
  // The held segments' ownership passes from the snapshot to the head.
  for (HeadSnapshot::Part& part : snapshot.parts) part.held = false;
  snapshot.parts.clear();
  head.adopt(std::move(segments), stats, snapshot.stats_capacity, snapshot.length,
             snapshot.newest_position, snapshot.seen, snapshot.effective_budget);
}

void release_snapshot(HeadSnapshot& snapshot, BlockPool& pool, const Geometry& g) {
  for (const HeadSnapshot::Part& part : snapshot.parts) {
    if (!part.held) continue;
    if (g.layout == KVC_LAYOUT_PAGED) {
      pool.give_back_block(part.segment.base);
    } else {
      pool.release(part.segment.base, segment_bytes(part.segment, g));
    }
  }
  snapshot.parts.clear();
}

}  // namespace kvc
