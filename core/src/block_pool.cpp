#include "block_pool.hpp"

#include <algorithm>

#include "kvcache/kvcache_error.hpp"

namespace kvc {

BlockPool::BlockPool(Backend& backend, size_t memory_limit, size_t block_bytes)
    : backend_(backend), limit_(memory_limit), block_bytes_(block_bytes) {}

BlockPool::~BlockPool() {
  for (void* block : free_blocks_) backend_.free(block);
}

void BlockPool::throw_out_of_memory(size_t requested) const {
  throw Error(KVC_ERR_OUT_OF_MEMORY,
              "memory limit reached: " + std::to_string(requested) + " more bytes needed, " +
                  std::to_string(counters_.bytes_used) + " of " + std::to_string(limit_) +
                  " bytes in use");
}

void BlockPool::note_used(size_t bytes) {
  counters_.bytes_used += bytes;
  counters_.bytes_peak = std::max(counters_.bytes_peak, counters_.bytes_used);
}

BlockPool::Taken BlockPool::take(size_t count, const std::vector<size_t>& sizes) {
  std::lock_guard<std::mutex> lock(mutex_);
  size_t bytes = 0;
  bool overflow = __builtin_mul_overflow(count, block_bytes_, &bytes);
  for (size_t size : sizes) overflow = __builtin_add_overflow(bytes, size, &bytes) || overflow;
  if (overflow) bytes = SIZE_MAX;
  if (bytes > limit_ - counters_.bytes_used) throw_out_of_memory(bytes);
  Taken taken;
  taken.memory = allocate_locked(sizes);
  try {
    taken.blocks = take_blocks_locked(count);
  } catch (...) {
    for (size_t i = 0; i < sizes.size(); ++i) {
      backend_.free(taken.memory[i]);
      counters_.bytes_reserved -= sizes[i];
    }
    throw;
  }
  counters_.blocks_used += count;
  note_used(bytes);
  return taken;
}

std::vector<void*> BlockPool::take_blocks(size_t count) { return take(count, {}).blocks; }

std::vector<void*> BlockPool::allocate(const std::vector<size_t>& sizes) {
  return take(0, sizes).memory;
}

std::vector<void*> BlockPool::take_blocks_locked(size_t count) {
  std::vector<void*> blocks;
  blocks.reserve(count);
  size_t from_free_list = std::min(count, free_blocks_.size());
  blocks.assign(free_blocks_.end() - static_cast<std::ptrdiff_t>(from_free_list), free_blocks_.end());
  size_t fresh = 0;
  for (; blocks.size() < count; ++fresh) {
    void* block = backend_.alloc(block_bytes_);
    if (!block) {
      for (size_t i = from_free_list; i < blocks.size(); ++i) backend_.free(blocks[i]);
      throw Error(KVC_ERR_OUT_OF_MEMORY, "backend '" + backend_.name() + "' is out of memory");
    }
    blocks.push_back(block);
  }
  free_blocks_.resize(free_blocks_.size() - from_free_list);
  counters_.bytes_reserved += fresh * block_bytes_;
  return blocks;
}

std::vector<void*> BlockPool::allocate_locked(const std::vector<size_t>& sizes) {
  std::vector<void*> allocations;
  allocations.reserve(sizes.size());
  size_t total = 0;
  for (size_t size : sizes) {
    void* ptr = backend_.alloc(size);
    if (!ptr) {
      for (void* done : allocations) backend_.free(done);
      throw Error(KVC_ERR_OUT_OF_MEMORY, "backend '" + backend_.name() + "' is out of memory");
    }
    allocations.push_back(ptr);
    total += size;
  }
  counters_.bytes_reserved += total;
  return allocations;
}

bool BlockPool::drop_owner(void* ptr, size_t bytes) {
  auto it = extra_owners_.find(ptr);
  if (it == extra_owners_.end()) return false;
  if (--it->second == 0) {
    extra_owners_.erase(it);
    n_shared_.store(extra_owners_.size(), std::memory_order_release);
    counters_.bytes_shared -= bytes;
  }
  return true;
}

void BlockPool::share(void* ptr, size_t bytes) {
  std::lock_guard<std::mutex> lock(mutex_);
  if (extra_owners_[ptr]++ == 0) counters_.bytes_shared += bytes;
  n_shared_.store(extra_owners_.size(), std::memory_order_release);
}

bool BlockPool::shared(const void* ptr) const {
  // A sequence's own segments cannot become shared while it is being written (fork takes the
  // cache exclusively), so reading "nothing is shared" without the lock is enough; acquire:
  // the other owner's last reads of a block it gave up happen before its writer's next write.
  if (n_shared_.load(std::memory_order_acquire) == 0) return false;
  std::lock_guard<std::mutex> lock(mutex_);
  return extra_owners_.count(ptr) != 0;
}

void BlockPool::give_back_block(void* block) {
  std::lock_guard<std::mutex> lock(mutex_);
  if (drop_owner(block, block_bytes_)) return;
  free_blocks_.push_back(block);
  counters_.blocks_used -= 1;
  counters_.bytes_used -= block_bytes_;
}

void BlockPool::release(void* ptr, size_t bytes, void* stream) {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    if (drop_owner(ptr, bytes)) return;
    counters_.bytes_reserved -= bytes;
    counters_.bytes_used -= bytes;
  }
  backend_.free(ptr, stream);
}

PoolCounters BlockPool::counters() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return counters_;
}

size_t BlockPool::blocks_available() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return block_bytes_ == 0 ? 0 : (limit_ - counters_.bytes_used) / block_bytes_;
}

}  // namespace kvc
