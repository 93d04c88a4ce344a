// The memory of one cache: backend allocations counted against the cache's memory limit.
// Paged caches take fixed-size blocks, recycled through a free list; contiguous caches take
// allocations of any size. Every request is all-or-nothing. A block or allocation may have
// several owners (forked sequences share K/V): it counts once, and goes back only when its
// last owner gives it back. Besides sequences, the prefix cache may hold a block (hold()); a
// block only it holds is cached, and a request that does not fit first asks the reclaimer to
// give cached blocks back. Thread-safe.
#pragma once

#include <cstddef>
#include <atomic>
#include <cstdint>
#include <functional>
#include <mutex>
#include <unordered_map>
#include <utility>
#include <vector>

#include "backend.hpp"

namespace kvc {

struct PoolCounters {
  size_t bytes_used = 0;      // blocks or allocations holding a sequence's storage, each once
  size_t bytes_peak = 0;
  size_t bytes_reserved = 0;  // taken from the backend: used plus pooled free blocks
  size_t blocks_used = 0;
  size_t bytes_shared = 0;    // of bytes_used, what more than one sequence holds
  size_t bytes_cached = 0;    // of bytes_used, blocks that only the prefix cache holds
};

class BlockPool {
 public:
  BlockPool(Backend& backend, size_t memory_limit, size_t block_bytes);
  ~BlockPool();
  BlockPool(const BlockPool&) = delete;
  BlockPool& operator=(const BlockPool&) = delete;

  size_t block_bytes() const { return block_bytes_; }
  size_t memory_limit() const { return limit_; }

  struct Taken {
    std::vector<void*> blocks, memory;
  };
  // `count` blocks of block_bytes and one allocation per size, checked against the limit as
  // one request: a kvc::Error OUT_OF_MEMORY leaves everything (the counters too) as it was.
  Taken take(size_t count, const std::vector<size_t>& sizes);
  // take(count, {}).blocks.
  std::vector<void*> take_blocks(size_t count);
  // Drops one owner of a block; the last one returns it to the free list.
  void give_back_block(void* block);

  // take(0, sizes).memory.
  std::vector<void*> allocate(const std::vector<size_t>& sizes);
  // Drops one owner of an allocation of `bytes`; the last one frees it, ordered on `stream`.
  void release(void* ptr, size_t bytes, void* stream = nullptr);

  // Adds an owner to a block or allocation of `bytes`.
  void share(void* ptr, size_t bytes);
  // Whether more than one owner holds it (a writer must copy it first).
  bool shared(const void* ptr) const;
  // Whether more than one owner besides the prefix cache holds it.
  bool shared_by_sequences(const void* ptr) const;

  // A hold of the prefix cache on a block that a sequence holds: one more owner, not a
  // sequence. A block findable by several keys has a hold for each.
  void hold(void* block);
  // Drops that hold; returns whether the block went back to the free list (no other owner).
  bool let_go(void* block);
  // Whether the prefix cache's holds are the block's only owners.
  bool only_held(const void* block) const;
  // Called without the pool's lock when a request lacks `bytes`: gives cached blocks back
  // (let_go) and returns whether it gave any.
  using Reclaimer = std::function<bool(size_t bytes)>;
  void set_reclaimer(Reclaimer reclaimer) { reclaimer_ = std::move(reclaimer); }
  // For a writer whose private copies do not fit: ends the prefix cache's hold on those of
  // `blocks` that one sequence (the writer) holds besides it, so that the writer may write
  // them in place. Returns whether it ended any.
  bool give_up_holds(const std::vector<const void*>& blocks);
  // Called without the pool's lock by give_up_holds(): the prefix cache lets go of these
  // blocks (and of what it can no longer find without them).
  using Releaser = std::function<void(const std::vector<const void*>& blocks)>;
  void set_releaser(Releaser releaser) { releaser_ = std::move(releaser); }

  PoolCounters counters() const;
  // Blocks that could still be taken before the limit.
  size_t blocks_available() const;

 private:
  [[noreturn]] void throw_out_of_memory(size_t requested) const;
  void note_used(size_t bytes);
  // Under the lock, from the free list or the backend; a failed backend allocation frees what
  // these took and throws OUT_OF_MEMORY with the counters unchanged. The caller notes the use.
  std::vector<void*> take_blocks_locked(size_t count);
  std::vector<void*> allocate_locked(const std::vector<size_t>& sizes);
  // Drops one owner of a shared pointer; false when it had only one (the caller frees it).
  bool drop_owner(void* ptr, size_t bytes);
  uint32_t owners_locked(const void* ptr) const;
  uint32_t sequence_owners_locked(const void* ptr) const {
    return owners_locked(ptr) - holds_locked(ptr);
  }
  uint32_t holds_locked(const void* block) const {
    const auto it = held_.find(block);
    return it == held_.end() ? 0 : it->second;
  }
  // Moves `bytes` between the shared and cached counts as a pointer's sequence owners go from
  // `before` to `after`.
  void reclassify(size_t bytes, uint32_t before, uint32_t after);
  void add_owner_locked(void* ptr);
  void free_block_locked(void* block);

  Backend& backend_;
  const size_t limit_;
  const size_t block_bytes_;
  mutable std::mutex mutex_;
  std::vector<void*> free_blocks_;
  std::unordered_map<const void*, uint32_t> extra_owners_;  // only pointers with several owners
  // Blocks the prefix cache holds, with its holds on each (one per key it is findable by).
  std::unordered_map<const void*, uint32_t> held_;
  Reclaimer reclaimer_;
  Releaser releaser_;
  // extra_owners_.size(), read without the lock: with no fork, shared() costs nothing.
  std::atomic<size_t> n_shared_{0};
  PoolCounters counters_;
};

}  // namespace kvc
