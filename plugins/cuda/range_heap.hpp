// The bookkeeping of the cuda backend's device memory (device_pool.*), host code that tests
// run on the CPU with host memory: chunks from a provider carved into 256-byte aligned ranges;
// a request takes the smallest free range that holds it (the rest stays free), and a freed
// range merges with the free ranges beside it in its chunk, so memory freed in pieces serves a
// larger request again (a contiguous cache grows by reallocating). Chunks double from 16 MiB
// to 1 GiB; when the provider has no chunk that large, the request asks for its own size, and
// when it has none at all, the chunks that are wholly free go back to it first.
// Not thread-safe: the pool locks around it.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <iterator>
#include <map>
#include <unordered_map>

namespace kvc::cuda {

// Provider: void* get(size_t bytes) (NULL when exhausted) and void put(void* chunk).
template <class Provider>
class RangeHeap {
 public:
  static constexpr size_t kAlignment = 256;
  static constexpr size_t kFirstChunk = size_t{16} << 20;
  static constexpr size_t kLargestChunk = size_t{1} << 30;

  explicit RangeHeap(Provider provider) : provider_(provider) {}
  RangeHeap(const RangeHeap&) = delete;
  RangeHeap& operator=(const RangeHeap&) = delete;
  ~RangeHeap() {
    for (const auto& chunk : chunks_) provider_.put(chunk.first);
  }

  // At least `bytes`, 256-byte aligned; NULL when the provider has no more. May throw
  // std::bad_alloc (host bookkeeping).
  void* alloc(size_t bytes) {
    if (bytes > SIZE_MAX - kAlignment) return nullptr;
    const size_t size = (std::max<size_t>(bytes, 1) + kAlignment - 1) / kAlignment * kAlignment;
    if (char* at = take(size)) return at;
    // A chunk of the growing size, else one just large enough, else the same after the wholly
    // free chunks went back.
    if (add_chunk(std::max(size, next_chunk_)) || add_chunk(size)) return take(size);
    return_free_chunks();
    return add_chunk(size) ? take(size) : nullptr;
  }

  // Gives back a range from alloc; anything else is ignored.
  void release(void* ptr) {
    auto used = used_.find(static_cast<char*>(ptr));
    if (used == used_.end()) return;
    char* at = used->first;
    size_t size = used->second;
    used_.erase(used);
    char* chunk = chunk_of(at);
    const char* chunk_end = chunk + chunks_.at(chunk);
    auto next = by_address_.lower_bound(at);
    if (next != by_address_.end() && next->first == at + size && next->first < chunk_end) {
      size += next->second;
      forget(next);
      next = by_address_.lower_bound(at);
    }
    if (next != by_address_.begin()) {
      auto before = std::prev(next);
      if (before->first >= chunk && before->first + before->second == at) {
        at = before->first;
        size += before->second;
        forget(before);
      }
    }
    remember(at, size);
  }

  size_t chunk_bytes() const {
    size_t total = 0;
    for (const auto& chunk : chunks_) total += chunk.second;
    return total;
  }
  size_t free_ranges() const { return by_address_.size(); }

 private:
  char* take(size_t size) {
    auto fit = by_size_.lower_bound(size);
    if (fit == by_size_.end()) return nullptr;
    char* at = fit->second;
    const size_t have = fit->first;
    forget(by_address_.find(at));
    if (have > size) remember(at + size, have - size);
    used_.emplace(at, size);
    return at;
  }
  bool add_chunk(size_t bytes) {
    char* chunk = static_cast<char*>(provider_.get(bytes));
    if (chunk == nullptr) return false;
    chunks_.emplace(chunk, bytes);
    remember(chunk, bytes);
    next_chunk_ = std::min(kLargestChunk, next_chunk_ * 2);
    return true;
  }
  void return_free_chunks() {
    for (auto chunk = chunks_.begin(); chunk != chunks_.end();) {
      auto range = by_address_.find(chunk->first);
      if (range != by_address_.end() && range->second == chunk->second) {
        forget(range);
        provider_.put(chunk->first);
        chunk = chunks_.erase(chunk);
      } else {
        ++chunk;
      }
    }
  }
  char* chunk_of(char* at) const { return std::prev(chunks_.upper_bound(at))->first; }
  void remember(char* at, size_t size) {
    by_address_.emplace(at, size);
    by_size_.emplace(size, at);
  }
  void forget(typename std::map<char*, size_t>::iterator range) {
    auto sized = by_size_.equal_range(range->second);
    for (auto it = sized.first; it != sized.second; ++it) {
      if (it->second == range->first) {
        by_size_.erase(it);
        break;
      }
    }
    by_address_.erase(range);
  }

  Provider provider_;
  size_t next_chunk_ = kFirstChunk;
  std::map<char*, size_t> chunks_;             // base, bytes
  std::map<char*, size_t> by_address_;         // free ranges
  std::multimap<size_t, char*> by_size_;       // the same, by size
  std::unordered_map<char*, size_t> used_;     // ranges handed out
};

}  // namespace kvc::cuda
