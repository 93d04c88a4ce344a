// Helpers shared by the store cases: random values, values that tell whether they are whole,
// and an instance that removes the keys it put when it goes away (stores on a shared server
// keep nothing of a run).
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <random>
#include <set>
#include <string>
#include <vector>

#include "environment.hpp"
#include "store_loader.hpp"

namespace kvc::store_tests {

inline std::vector<unsigned char> random_bytes(size_t size, uint64_t seed) {
  std::mt19937_64 generator(seed);
  std::vector<unsigned char> bytes(size);
  size_t i = 0;
  for (; i + 8 <= size; i += 8) {
    const uint64_t word = generator();
    for (size_t b = 0; b < 8; ++b) bytes[i + b] = static_cast<unsigned char>(word >> (8 * b));
  }
  for (const uint64_t word = generator(); i < size; ++i) {
    bytes[i] = static_cast<unsigned char>(word >> (8 * (i % 8)));
  }
  return bytes;
}

// Each value says who wrote it (which writer, which round) and is otherwise random bytes from
// that: a get of a mix of two writes, or of a part of one, does not match what it says.
inline std::vector<unsigned char> signed_value(uint32_t writer, uint32_t round) {
  const uint64_t seed = (uint64_t{writer} << 32) | round;
  std::vector<unsigned char> value = random_bytes(16 + (seed * 2654435761u) % 50000, seed);
  std::memcpy(value.data(), &seed, sizeof seed);
  const uint64_t size = value.size();
  std::memcpy(value.data() + 8, &size, sizeof size);
  return value;
}

inline bool is_whole_signed_value(const std::vector<unsigned char>& value, uint32_t* writer) {
  if (value.size() < 16) return false;
  uint64_t seed = 0;
  std::memcpy(&seed, value.data(), sizeof seed);
  *writer = static_cast<uint32_t>(seed >> 32);
  return value == signed_value(*writer, static_cast<uint32_t>(seed));
}

class StoreUnderTest : public Store {
 public:
  explicit StoreUnderTest(const Params& params) : Store(environment().plugin(), params) {}
  StoreUnderTest() : StoreUnderTest(environment().fresh_params()) {}
  ~StoreUnderTest() {
    if (!ok()) return;
    for (const std::string& key : keys_) Store::remove(key);
  }

  // Removed at the end without being put here (keys put from other threads).
  void track(const std::string& key) { keys_.insert(key); }

  Outcome put(const std::string& key, const void* data, size_t size) {
    track(key);
    return Store::put(key, data, size);
  }
  Outcome put(const std::string& key, const std::vector<unsigned char>& value) {
    return put(key, value.data(), value.size());
  }

 private:
  std::set<std::string> keys_;
};

}  // namespace kvc::store_tests
