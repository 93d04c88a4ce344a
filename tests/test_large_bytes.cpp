// kvcache_support/large_bytes.hpp: memory for values of megabytes, huge-page aligned from
// 2 MiB up, never null for a value that exists, null when it cannot be had.
#include <doctest/doctest.h>

#include <cstdint>
#include <cstring>
#include <initializer_list>
#include <limits>

#include "kvcache_support/large_bytes.hpp"

using kvc::support::LargeBytes;

TEST_CASE("large bytes: writable memory of each size, huge-page aligned from 2 MiB") {
  constexpr size_t kHuge = size_t{2} << 20;
  for (size_t size : {size_t{0}, size_t{1}, size_t{4095}, kHuge - 1, kHuge, 5 * kHuge + 3}) {
    CAPTURE(size);
    const LargeBytes bytes = LargeBytes::allocate(size);
    REQUIRE(bytes.data() != nullptr);
    CHECK(bytes.size() == size);
    if (size >= kHuge) CHECK(reinterpret_cast<uintptr_t>(bytes.data()) % kHuge == 0);
    std::memset(bytes.data(), 0xA5, size);  // ASan: within the allocation
    if (size > 0) CHECK(bytes.data()[size - 1] == 0xA5);
  }
}

// Sizes whose rounding up to whole huge pages overflows: refused before any allocation (a
// merely enormous size would stop the sanitizer run, whose allocator does not return null).
TEST_CASE("large bytes: a size that cannot be had is empty, not an exception") {
  const size_t max = std::numeric_limits<size_t>::max();
  for (size_t size : {max, max - (size_t{1} << 20)}) {
    CAPTURE(size);
    const LargeBytes bytes = LargeBytes::allocate(size);
    CHECK(bytes.data() == nullptr);
    CHECK(bytes.size() == 0);
  }
}
