// Helpers shared by the store cases: random values and an instance that removes the keys it
// put when it goes away (stores on a shared server keep nothing of a run).
#pragma once

#include <cstddef>
#include <cstdint>
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
