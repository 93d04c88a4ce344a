// Where a test plugin is: the path the build compiled in or, when KVC_TEST_PLUGINS names a
// folder (the relocated device kit, bench/cuda/kit), the file of the same name in it.
#pragma once

#include <cstdlib>
#include <string>

namespace kvt {

inline std::string test_plugin_path(const char* built) {
  const char* folder = std::getenv("KVC_TEST_PLUGINS");
  if (folder == nullptr || *folder == '\0') return built;
  const std::string path(built);
  return std::string(folder) + "/" + path.substr(path.find_last_of('/') + 1);
}

}  // namespace kvt
