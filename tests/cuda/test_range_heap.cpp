// The cuda backend's device-memory bookkeeping (plugins/cuda/range_heap.hpp) over host memory:
// freed ranges merge and serve larger requests, a contiguous cache that grows and shrinks stays
// within a bound of chunks, and wholly free chunks go back when the provider runs out.
#include <doctest/doctest.h>

#include <cstdint>
#include <cstdlib>
#include <set>
#include <vector>

#include "range_heap.hpp"

namespace {

// Host memory with a cap, counting what it hands out.
struct CappedHost {
  size_t* cap;
  size_t* out;
  void* get(size_t bytes) const {
    if (*out + bytes > *cap) return nullptr;
    *out += bytes;
    // The chunk's size before it, so put knows what comes back.
    auto* memory = static_cast<size_t*>(std::aligned_alloc(256, bytes + 256));
    *memory = bytes;
    return reinterpret_cast<char*>(memory) + 256;
  }
  void put(void* chunk) const {
    auto* memory = reinterpret_cast<size_t*>(static_cast<char*>(chunk) - 256);
    *out -= *memory;
    std::free(memory);
  }
};

using Heap = kvc::cuda::RangeHeap<CappedHost>;
constexpr size_t kMiB = size_t{1} << 20;

}  // namespace

TEST_CASE("range heap: ranges are aligned, disjoint and merge when freed") {
  size_t cap = SIZE_MAX, out = 0;
  Heap heap(CappedHost{&cap, &out});
  std::vector<char*> ranges;
  for (size_t bytes : {1, 255, 256, 257, 4096, 1000}) {
    char* at = static_cast<char*>(heap.alloc(bytes));
    REQUIRE(at != nullptr);
    CHECK(reinterpret_cast<uintptr_t>(at) % 256 == 0);
    ranges.push_back(at);
  }
  CHECK(std::set<char*>(ranges.begin(), ranges.end()).size() == ranges.size());
  CHECK(ranges[1] == ranges[0] + 256);  // one chunk, carved in order
  // Freeing the first three, in any order, leaves one range of 768 bytes at the first.
  heap.release(ranges[1]);
  heap.release(ranges[0]);
  heap.release(ranges[2]);
  CHECK(heap.alloc(768) == ranges[0]);
  heap.release(nullptr);       // ignored
  heap.release(ranges[0] + 1); // not a range: ignored
  CHECK(out == Heap::kFirstChunk);
}

TEST_CASE("range heap: a contiguous cache growing by doubling reuses its freed arrays") {
  size_t cap = SIZE_MAX, out = 0;
  Heap heap(CappedHost{&cap, &out});
  // Four heads grow side by side from 64 KiB to 32 MiB and shrink back, three times.
  for (int round = 0; round < 3; ++round) {
    std::vector<void*> heads(4, nullptr);
    for (size_t bytes = 64 << 10; bytes <= 32 * kMiB; bytes *= 2) {
      for (void*& head : heads) {
        void* grown = heap.alloc(bytes);
        REQUIRE(grown != nullptr);
        heap.release(head);
        head = grown;
      }
    }
    for (void* head : heads) heap.release(head);
  }
  // 128 MiB live at the peak, with the previous arrays (64 MiB) still held while growing: the
  // chunks stay within 2.5 times that and do not grow after the first round.
  const size_t after_first = heap.chunk_bytes();
  CHECK(after_first <= 480 * kMiB);
  for (int round = 0; round < 2; ++round) {
    void* a = heap.alloc(48 * kMiB);
    void* b = heap.alloc(48 * kMiB);
    REQUIRE(a != nullptr);
    REQUIRE(b != nullptr);
    heap.release(a);
    heap.release(b);
  }
  CHECK(heap.chunk_bytes() == after_first);
  CHECK(heap.free_ranges() <= heap.chunk_bytes() / (16 * kMiB));  // merged back to whole chunks
}

TEST_CASE("range heap: when the provider runs out, wholly free chunks go back and it retries") {
  size_t cap = 64 * kMiB, out = 0;
  Heap heap(CappedHost{&cap, &out});
  void* small = heap.alloc(kMiB);         // in the first 16 MiB chunk
  void* large = heap.alloc(32 * kMiB);    // a 32 MiB chunk of its own
  REQUIRE(small != nullptr);
  REQUIRE(large != nullptr);
  CHECK(out == 48 * kMiB);
  heap.release(large);
  // 40 MiB fits in no free range, and the provider has 16 MiB left: the free 32 MiB chunk goes
  // back first.
  void* larger = heap.alloc(40 * kMiB);
  REQUIRE(larger != nullptr);
  CHECK(out == 56 * kMiB);
  CHECK(heap.alloc(40 * kMiB) == nullptr);  // the 16 MiB chunk is in use: out of memory
  heap.release(small);
  heap.release(larger);
}
