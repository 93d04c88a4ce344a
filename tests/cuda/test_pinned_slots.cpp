// The cuda backend's pinned staging bookkeeping (plugins/cuda/pinned_slots.hpp) over host
// memory and fake events: a call takes the smallest free buffer that fits, never one whose copy
// may still run, and a buffer left idle goes back to the host, so one large call does not pin
// its memory for good.
#include <doctest/doctest.h>

#include <cstdlib>
#include <map>
#include <new>
#include <set>

#include "pinned_slots.hpp"

namespace {

// Host memory and events that complete when the test says so; counts what is held.
struct World {
  std::map<void*, size_t> memory;
  std::map<int, bool> events;  // id -> completed
  std::map<int, int> streams;  // id -> the stream it was last recorded on
  int next_event = 1;
  size_t fail_above = SIZE_MAX;  // alloc throws for larger requests
  int waits = 0;
  size_t held() const {
    size_t bytes = 0;
    for (const auto& entry : memory) bytes += entry.second;
    return bytes;
  }
  void complete_all() {
    for (auto& entry : events) entry.second = true;
  }
  // Completes the events last recorded on `stream`: the work of other streams still runs.
  void complete(int stream) {
    for (auto& entry : events) entry.second = entry.second || streams[entry.first] == stream;
  }
};

struct FakeHost {
  using Event = int;
  using Stream = int;
  World* world;
  void* alloc(size_t bytes) const {
    if (bytes > world->fail_above) throw std::bad_alloc();
    void* data = std::malloc(bytes);
    world->memory[data] = bytes;
    return data;
  }
  void free(void* data) const {
    CHECK(world->memory.erase(data) == 1);
    std::free(data);
  }
  Event make_event() const {
    world->events[world->next_event] = true;
    return world->next_event++;
  }
  void destroy(Event event) const { CHECK(world->events.erase(event) == 1); }
  // A recorded event completes when the test completes it.
  void record(Event event, Stream stream) const {
    world->events.at(event) = false;
    world->streams[event] = stream;
  }
  bool done(Event event) const { return world->events.at(event); }
  void wait(Event event) const {
    ++world->waits;
    world->events.at(event) = true;
  }
};

using Slots = kvc::cuda::PinnedSlots<FakeHost>;
constexpr size_t kMiB = size_t{1} << 20;

}  // namespace

TEST_CASE("pinned slots: the smallest free buffer that fits, never one whose copy may run") {
  World world;
  Slots slots(FakeHost{&world});
  const Slots::Buffer small = slots.acquire(100);
  const Slots::Buffer big = slots.acquire(8 * kMiB);
  CHECK(world.memory.at(small.data) == kMiB);  // at least 1 MiB
  CHECK(world.memory.at(big.data) == 8 * kMiB);
  slots.release(small, 0);
  slots.release(big, 0);
  // Both copies still run: a new buffer.
  const Slots::Buffer third = slots.acquire(10);
  CHECK(third.data != small.data);
  CHECK(third.data != big.data);
  slots.release(third, 0);
  world.complete_all();
  // All free: the smallest that fits, unless more than 4 times too large.
  const Slots::Buffer fits = slots.acquire(2 * kMiB);
  CHECK(fits.data == big.data);
  slots.release(fits, 0);
  world.complete_all();
  const Slots::Buffer own = slots.acquire(1500 * 1024);  // 8 MiB is more than 4 x 1.5 MiB
  CHECK(own.data != big.data);
  CHECK(world.memory.at(own.data) == 1500 * 1024);
  slots.release(own, 0);
  const Slots::Buffer tiny = slots.acquire(10);
  CHECK((tiny.data == small.data || tiny.data == third.data));
  slots.release(tiny, 0);
  CHECK(slots.bytes_held() == 10 * kMiB + 1500 * 1024);
  CHECK(world.held() == slots.bytes_held());
}

TEST_CASE("pinned slots: a buffer left idle goes back to the host, never one taken or copying") {
  World world;
  {
    Slots slots(FakeHost{&world});
    const Slots::Buffer big = slots.acquire(64 * kMiB);  // one large call
    slots.release(big, 0);
    world.complete_all();
    // Small calls follow, each done before the next: the large buffer is too large for them.
    const Slots::Buffer held = slots.acquire(kMiB);  // taken throughout
    CHECK(held.data != big.data);
    for (uint64_t i = 0; i < 2 * Slots::kIdleAcquisitions; ++i) {
      const Slots::Buffer b = slots.acquire(1000);
      CHECK(b.data != big.data);
      slots.release(b, 0);
      world.complete_all();
    }
    CHECK(world.memory.count(big.data) == 0);
    CHECK(world.memory.count(held.data) == 1);
    CHECK(slots.bytes_held() == 2 * kMiB);
    CHECK(world.held() == 2 * kMiB);
    slots.release(held, 0);

    // A buffer whose copy has not run is kept however long it idles.
    const Slots::Buffer copying = slots.acquire(32 * kMiB);
    slots.release(copying, 7);
    for (uint64_t i = 0; i < 2 * Slots::kIdleAcquisitions; ++i) {
      const Slots::Buffer b = slots.acquire(1000);
      CHECK(b.data != copying.data);
      slots.release(b, 0);
      world.complete(0);
    }
    CHECK(world.memory.count(copying.data) == 1);
    // The small calls kept one of the two small buffers busy; the other went back.
    CHECK(slots.bytes_held() == 33 * kMiB);
    CHECK(world.held() == slots.bytes_held());
  }
  // The destructor waits for copies still running, then gives everything back.
  CHECK(world.waits > 0);
  CHECK(world.memory.empty());
  CHECK(world.events.empty());
}

TEST_CASE("pinned slots: a failed allocation leaves nothing behind") {
  World world;
  Slots slots(FakeHost{&world});
  const Slots::Buffer first = slots.acquire(kMiB);
  slots.release(first, 0);
  world.fail_above = 4 * kMiB;
  CHECK_THROWS_AS(slots.acquire(16 * kMiB), std::bad_alloc);
  CHECK(world.events.size() == 1);
  CHECK(slots.bytes_held() == kMiB);
  world.complete_all();
  CHECK(slots.acquire(100).data == first.data);
}
