// The memory of one cache: backend allocations counted against the cache's memory limit.
// Paged caches take fixed-size blocks, recycled through a free list; contiguous caches take
// allocations of any size. Every request is all-or-nothing. Thread-safe.
#pragma once

#include <cstddef>
#include <mutex>
#include <vector>

#include "backend.hpp"

namespace kvc {

struct PoolCounters {
  size_t bytes_used = 0;      // blocks or allocations holding a sequence's storage
  size_t bytes_peak = 0;
  size_t bytes_reserved = 0;  // taken from the backend: used plus pooled free blocks
  size_t blocks_used = 0;
};

class BlockPool {
 public:
  BlockPool(Backend& backend, size_t memory_limit, size_t block_bytes);
  ~BlockPool();
  BlockPool(const BlockPool&) = delete;
  BlockPool& operator=(const BlockPool&) = delete;

  size_t block_bytes() const { return block_bytes_; }
  size_t memory_limit() const { return limit_; }

  // `count` blocks of block_bytes, or a kvc::Error OUT_OF_MEMORY with nothing taken.
  std::vector<void*> take_blocks(size_t count);
  void give_back_block(void* block);

  // One allocation per size, or a kvc::Error OUT_OF_MEMORY with nothing taken.
  std::vector<void*> allocate(const std::vector<size_t>& sizes);
  void release(void* ptr, size_t bytes);

  PoolCounters counters() const;
  // Blocks that could still be taken before the limit.
  size_t blocks_available() const;

 private:
  [[noreturn]] void throw_out_of_memory(size_t requested) const;
  void note_used(size_t bytes);

  Backend& backend_;
  const size_t limit_;
  const size_t block_bytes_;
  mutable std::mutex mutex_;
  std::vector<void*> free_blocks_;
  PoolCounters counters_;
};

}  // namespace kvc
