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
  std::unique_lock<std::mutex> lock(mutex_);
  size_t bytes = 0;
  bool overflow = __builtin_mul_overflow(count, block_bytes_, &bytes);
  for (size_t size : sizes) overflow = __builtin_add_overflow(bytes, size, &bytes) || overflow;
  if (overflow) bytes = SIZE_MAX;
  while (bytes > limit_ - counters_.bytes_used) {
    // Cached blocks cannot cover more than they hold: a request beyond that fails at once.
    const size_t missing = bytes - (limit_ - counters_.bytes_used);
    if (!reclaimer_ || missing > counters_.bytes_cached) throw_out_of_memory(bytes);
    lock.unlock();
    const bool gave_back = reclaimer_(missing);
    lock.lock();
    if (!gave_back) throw_out_of_memory(bytes);
  }
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

uint32_t BlockPool::owners_locked(const void* ptr) const {
  const auto it = extra_owners_.find(ptr);
  return 1 + (it == extra_owners_.end() ? 0 : it->second);
}

void BlockPool::reclassify(size_t bytes, uint32_t before, uint32_t after) {
  if ((before >= 2) != (after >= 2)) {
    if (after >= 2) {
      counters_.bytes_shared += bytes;
    } else {
      counters_.bytes_shared -= bytes;
    }
  }
  if ((before == 0) != (after == 0)) {
    if (after == 0) {
      counters_.bytes_cached += bytes;
    } else {
      counters_.bytes_cached -= bytes;
    }
  }
}

bool BlockPool::drop_owner(void* ptr, size_t bytes) {
  auto it = extra_owners_.find(ptr);
  if (it == extra_owners_.end()) return false;
  const uint32_t before = sequence_owners_locked(ptr);
  if (--it->second == 0) {
    extra_owners_.erase(it);
    n_shared_.store(extra_owners_.size(), std::memory_order_release);
  }
  reclassify(bytes, before, before - 1);
  return true;
}

void BlockPool::add_owner_locked(void* ptr) {
  ++extra_owners_[ptr];
  n_shared_.store(extra_owners_.size(), std::memory_order_release);
}

void BlockPool::share(void* ptr, size_t bytes) {
  std::lock_guard<std::mutex> lock(mutex_);
  const uint32_t before = sequence_owners_locked(ptr);
  add_owner_locked(ptr);
  reclassify(bytes, before, before + 1);
}

bool BlockPool::shared(const void* ptr) const {
  // A sequence's own segments cannot become shared while it is being written (fork takes the
  // cache exclusively, and publishing holds the sequence), so reading "nothing is shared"
  // without the lock is enough; acquire: the other owner's last reads of a block it gave up
  // happen before its writer's next write.
  if (n_shared_.load(std::memory_order_acquire) == 0) return false;
  std::lock_guard<std::mutex> lock(mutex_);
  return extra_owners_.count(ptr) != 0;
}

bool BlockPool::shared_by_sequences(const void* ptr) const {
  std::lock_guard<std::mutex> lock(mutex_);
  return sequence_owners_locked(ptr) >= 2;
}

void BlockPool::free_block_locked(void* block) {
  free_blocks_.push_back(block);
  counters_.blocks_used -= 1;
  counters_.bytes_used -= block_bytes_;
}

void BlockPool::give_back_block(void* block) {
  std::lock_guard<std::mutex> lock(mutex_);
  if (drop_owner(block, block_bytes_)) return;
  free_block_locked(block);
}

void BlockPool::hold(void* block) {
  std::lock_guard<std::mutex> lock(mutex_);
  add_owner_locked(block);
  ++held_[block];
}

bool BlockPool::let_go(void* block) {
  std::lock_guard<std::mutex> lock(mutex_);
  const auto held = held_.find(block);
  if (--held->second == 0) held_.erase(held);
  const auto it = extra_owners_.find(block);
  if (it != extra_owners_.end()) {  // sequences or other holds keep it
    if (--it->second == 0) {
      extra_owners_.erase(it);
      n_shared_.store(extra_owners_.size(), std::memory_order_release);
    }
    return false;
  }
  counters_.bytes_cached -= block_bytes_;
  free_block_locked(block);
  return true;
}

bool BlockPool::only_held(const void* block) const {
  std::lock_guard<std::mutex> lock(mutex_);
  const uint32_t holds = holds_locked(block);
  return holds != 0 && owners_locked(block) == holds;
}

bool BlockPool::give_up_holds(const std::vector<const void*>& blocks) {
  std::vector<const void*> writable;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    for (const void* block : blocks) {
      if (holds_locked(block) != 0 && sequence_owners_locked(block) == 1) writable.push_back(block);
    }
  }
  if (writable.empty() || !releaser_) return false;
  releaser_(writable);
  return true;
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
  const size_t free_bytes = limit_ - counters_.bytes_used + (reclaimer_ ? counters_.bytes_cached : 0);
  return block_bytes_ == 0 ? 0 : free_bytes / block_bytes_;
}

}  // namespace kvc
