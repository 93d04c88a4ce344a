// What the fault cases share: the plugin, stores on a test's own server, values.
#pragma once

#include <cstddef>
#include <cstdint>
#include <random>
#include <string>
#include <vector>

#include "../store_loader.hpp"
#include "redis_server.hpp"

namespace kvc::store_tests {

const StorePlugin& redis_plugin();

// Parameters of a store on `server`, plus `extra`.
inline Params params_for(const RedisServer& server, Params extra = {}) {
  Params params{{"host", "127.0.0.1"}, {"port", std::to_string(server.port())}};
  params.insert(params.end(), extra.begin(), extra.end());
  return params;
}

inline std::vector<unsigned char> bytes_of(size_t size, uint64_t seed) {
  std::mt19937_64 generator(seed);
  std::vector<unsigned char> bytes(size);
  for (size_t i = 0; i < size; i += 8) {
    const uint64_t word = generator();
    for (size_t b = 0; b < 8 && i + b < size; ++b) {
      bytes[i + b] = static_cast<unsigned char>(word >> (8 * b));
    }
  }
  return bytes;
}

inline bool contains(const std::string& text, const std::string& part) {
  return text.find(part) != std::string::npos;
}

}  // namespace kvc::store_tests
