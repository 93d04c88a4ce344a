// The stats_probe test policy (tests/plugins/stats_probe.c) as the suites use it: the YAML that
// loads it, and its record of the statistics it was handed last (needs
// KVC_TEST_STATS_PROBE_PLUGIN, the built plugin's path).
#pragma once

#include <dlfcn.h>
#include <doctest/doctest.h>

#include <cstdint>
#include <string>

#include "test_plugin_path.hpp"

namespace kvt {

inline std::string probe_yaml() {
  return "plugins: { paths: [" + test_plugin_path(KVC_TEST_STATS_PROBE_PLUGIN) + "] }\n";
}

// kvc_probe_read(layer, kv_head, which, &pos, &values): which = 0 sum, 1 last, 2 window;
// returns the token count.
using ProbeRead = int32_t (*)(int32_t, int32_t, int32_t, const int32_t**, const float**);

inline ProbeRead probe_reader() {
  void* handle =
      dlopen(test_plugin_path(KVC_TEST_STATS_PROBE_PLUGIN).c_str(), RTLD_NOW | RTLD_NOLOAD);
  REQUIRE(handle != nullptr);
  auto read = reinterpret_cast<ProbeRead>(dlsym(handle, "kvc_probe_read"));
  dlclose(handle);
  REQUIRE(static_cast<bool>(read));
  return read;
}

}  // namespace kvt
