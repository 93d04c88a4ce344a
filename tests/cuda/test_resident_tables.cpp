// The cuda backend's resident segment tables (plugins/cuda/resident_tables.hpp) over host
// memory and fake streams: a table is found again only at its version and once filled, a new
// version replaces the old, the least recently used go past the budget but never one a call
// holds, a call on another stream waits for a table's last use, and every table is freed
// behind a mark that covers all its uses.
#include <doctest/doctest.h>

#include <cstdlib>
#include <map>
#include <memory>
#include <vector>

#include "resident_tables.hpp"

namespace {

struct Freed {
  int stream;
  int after;  // the mark's call number (0: none)
};

struct World {
  std::map<void*, size_t> memory;
  std::map<void*, Freed> freed;  // by address, the last free of it
  std::vector<std::pair<int, int>> waits;  // (stream, mark's call) of each wait
  size_t room = SIZE_MAX;        // alloc gives NULL past this many bytes held
  int marks = 0;
  size_t held() const {
    size_t bytes = 0;
    for (const auto& entry : memory) bytes += entry.second;
    return bytes;
  }
};

struct FakeDevice {
  using Stream = int;
  struct Mark {
    int call = 0;
  };
  World* world;
  void* alloc(size_t bytes, Stream) const {
    if (world->held() + bytes > world->room) return nullptr;
    void* data = std::malloc(bytes);
    world->memory[data] = bytes;
    return data;
  }
  Mark mark(Stream) const noexcept { return Mark{++world->marks}; }
  void wait(Stream stream, const Mark& mark) const noexcept {
    world->waits.push_back({stream, mark.call});
  }
  void free(void* data, Stream stream, const Mark* after) const noexcept {
    CHECK(world->memory.erase(data) == 1);
    world->freed[data] = Freed{stream, after ? after->call : 0};
    std::free(data);
  }
};

using Tables = kvc::cuda::ResidentTables<FakeDevice>;
using Table = Tables::Table;
constexpr size_t kKiB = 1024;
constexpr size_t kBudget = size_t{1} << 20;

// One call holding `tables` on `stream`, all filled.
void end_call(Tables& tables, const std::vector<const Table*>& held, int stream) {
  tables.release(Tables::new_mark(), held, std::vector<bool>(held.size(), true), stream);
}

}  // namespace

TEST_CASE("resident tables: found at their version once filled; a new version replaces the old") {
  World world;
  Tables tables(FakeDevice{&world}, kBudget);
  CHECK(tables.find(7, 1, 3, 0) == nullptr);
  const Table* stored = tables.store(7, 1, 3, 4 * kKiB, true, 0);
  REQUIRE(stored != nullptr);
  CHECK(stored->vector_loads);
  CHECK(tables.find(7, 1, 3, 0) == nullptr);  // not filled yet
  end_call(tables, {stored}, 0);
  const Table* found = tables.find(7, 1, 3, 0);
  CHECK(found == stored);
  CHECK(tables.find(7, 2, 3, 0) == nullptr);  // another version
  CHECK(tables.find(7, 1, 4, 0) == nullptr);  // another segment count
  end_call(tables, {found}, 0);             // call 2
  // Version 2 replaces version 1, freed on the storing call's stream behind call 2's mark.
  void* old_memory = stored->memory;
  const Table* second = tables.store(7, 2, 4, 8 * kKiB, false, 5);
  REQUIRE(second != nullptr);
  CHECK(world.freed.at(old_memory).stream == 5);
  CHECK(world.freed.at(old_memory).after == 2);
  end_call(tables, {second}, 5);
  CHECK(tables.find(7, 1, 3, 0) == nullptr);
  CHECK(tables.find(7, 2, 4, 0) == second);
  end_call(tables, {second}, 5);
  CHECK(tables.size() == 1);
  CHECK(tables.bytes() == 8 * kKiB);
  CHECK(world.held() == 8 * kKiB);
}

TEST_CASE("resident tables: past the bound the least recently used go, never a held one") {
  World world;
  Tables tables(FakeDevice{&world}, kBudget);
  const size_t quarter = kBudget / 4;
  std::vector<const Table*> first;
  for (uint64_t id = 1; id <= 4; ++id) first.push_back(tables.store(id, 1, 1, quarter, true, 0));
  end_call(tables, first, 0);
  CHECK(tables.bytes() == kBudget);
  // Table 1 used again: table 2 is now the least recently used.
  const Table* one = tables.find(1, 1, 1, 0);
  REQUIRE(one != nullptr);
  const Table* fifth = tables.store(5, 1, 1, quarter, true, 3);
  REQUIRE(fifth != nullptr);
  CHECK(tables.find(2, 1, 1, 0) == nullptr);
  CHECK(tables.bytes() == kBudget);
  end_call(tables, {one, fifth}, 3);

  // Every table held by one call: a store past the bound goes without, changing nothing.
  std::vector<const Table*> all;
  for (uint64_t id : {1, 3, 4, 5}) all.push_back(tables.find(id, 1, 1, 0));
  for (const Table* t : all) REQUIRE(t != nullptr);
  CHECK(tables.store(6, 1, 1, 1, true, 3) == nullptr);
  CHECK(tables.size() == 4);
  // Another version of a held table goes without too.
  CHECK(tables.store(4, 2, 1, 1, true, 3) == nullptr);
  end_call(tables, all, 3);
  CHECK(tables.find(4, 1, 1, 0) != nullptr);
}

TEST_CASE("resident tables: a table never filled is dropped; a full device goes without") {
  World world;
  Tables tables(FakeDevice{&world}, kBudget);
  const Table* failed = tables.store(9, 1, 2, kKiB, true, 0);
  REQUIRE(failed != nullptr);
  void* memory = failed->memory;
  tables.release(Tables::new_mark(), {failed}, {false}, 0);  // the call failed before its copy
  CHECK(tables.size() == 0);
  CHECK(world.freed.count(memory) == 1);
  CHECK(tables.find(9, 1, 2, 0) == nullptr);
  world.room = 0;
  CHECK(tables.store(9, 1, 2, kKiB, true, 0) == nullptr);
  CHECK(tables.bytes() == 0);
}

TEST_CASE("resident tables: destruction frees every table behind its last call's mark") {
  World world;
  {
    Tables tables(FakeDevice{&world}, kBudget);
    const Table* a = tables.store(1, 1, 1, kKiB, true, 2);
    const Table* b = tables.store(2, 1, 1, kKiB, true, 2);
    end_call(tables, {a, b}, 2);
    CHECK(world.held() == 2 * kKiB);
  }
  CHECK(world.memory.empty());
  for (const auto& entry : world.freed) CHECK(entry.second.after == 1);
}

TEST_CASE("resident tables: a call on another stream waits for the table's last use") {
  World world;
  Tables tables(FakeDevice{&world}, kBudget);
  const Table* stored = tables.store(3, 1, 2, kKiB, true, 1);
  end_call(tables, {stored}, 1);  // mark 1 on stream 1: the fill and its call
  CHECK(tables.find(3, 1, 2, 1) == stored);
  CHECK(world.waits.empty());  // the same stream: in order already
  end_call(tables, {stored}, 1);  // mark 2
  CHECK(tables.find(3, 1, 2, 4) == stored);
  REQUIRE(world.waits.size() == 1);
  CHECK(world.waits[0] == std::pair<int, int>{4, 2});
  end_call(tables, {stored}, 4);  // mark 3 on stream 4, after mark 2: no second wait
  CHECK(world.waits.size() == 1);
}

TEST_CASE("resident tables: the mark covers every stream that held the table") {
  World world;
  Tables tables(FakeDevice{&world}, kBudget);
  const Table* t = tables.store(5, 1, 1, kKiB, true, 1);
  end_call(tables, {t}, 1);  // mark 1
  // Two calls hold it at once, on streams 2 and 3; the one on 3 ends first.
  const Table* on2 = tables.find(5, 1, 1, 2);
  const Table* on3 = tables.find(5, 1, 1, 3);
  REQUIRE((on2 == t && on3 == t));
  world.waits.clear();
  end_call(tables, {on3}, 3);  // mark 2 on stream 3
  end_call(tables, {on2}, 2);  // stream 2 waits for mark 2, then mark 3
  CHECK(world.waits == std::vector<std::pair<int, int>>{{2, 2}});
  // A new version dropped on stream 4 is freed after mark 3, which covers both calls.
  void* memory = t->memory;
  REQUIRE(tables.store(5, 2, 1, kKiB, true, 4) != nullptr);
  CHECK(world.freed.at(memory).stream == 4);
  CHECK(world.freed.at(memory).after == 3);
}
