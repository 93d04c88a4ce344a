// What the demote suites (test_demote.cpp, test_demote_review.cpp) share: random rows, arming
// the fault backend (tests/plugins/fault_backend.c) and a sequence's export.
#pragma once

#include <dlfcn.h>

#include <random>
#include <vector>

#include "test_support.hpp"

namespace dmt {

inline std::vector<float> random_rows(std::mt19937& rng, size_t n) {
  std::uniform_real_distribution<float> dist(-1.0f, 1.0f);
  std::vector<float> out(n);
  for (float& x : out) x = dist(rng);
  return out;
}

// Makes the nth call of the fault backend's `entry` from now fail (entry -1: none).
inline void arm_fault(int entry, long nth) {
  void* handle = dlopen(KVC_TEST_FAULT_PLUGIN, RTLD_NOW | RTLD_NOLOAD);
  REQUIRE(handle != nullptr);
  auto arm = reinterpret_cast<void (*)(int, long, int32_t, const char*)>(
      dlsym(handle, "kvc_fault_arm"));
  const bool found = arm != nullptr;
  REQUIRE(found);
  arm(entry, nth, KVC_ERR_PLUGIN, "injected fault");
  dlclose(handle);
}

inline std::vector<unsigned char> exported(kvc_cache* cache, int32_t seq) {
  size_t size = 0, written = 0;
  KVT_REQUIRE_OK(kvc_seq_export_size(cache, seq, &size));
  std::vector<unsigned char> bytes(size);
  KVT_REQUIRE_OK(kvc_seq_export(cache, seq, bytes.data(), bytes.size(), &written));
  bytes.resize(written);
  return bytes;
}

}  // namespace dmt
