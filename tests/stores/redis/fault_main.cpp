// kvc-redis-fault-tests: the redis store plugin against redis-server processes each case
// starts, stops, kills and restarts itself (redis_server.hpp). Skipped (77) when there is no
// redis-server ($KVC_TEST_REDIS_SERVER, else PATH).
#define DOCTEST_CONFIG_IMPLEMENT
#include <doctest/doctest.h>

#include <cstdio>
#include <memory>

#include "fault_support.hpp"
#include "redis_server.hpp"

namespace kvc::store_tests {
namespace {
std::unique_ptr<StorePlugin> the_plugin;
}  // namespace

const StorePlugin& redis_plugin() { return *the_plugin; }

}  // namespace kvc::store_tests

int main(int argc, char** argv) {
  using namespace kvc::store_tests;
  if (redis_server_binary().empty()) {
    std::printf("skipped: no redis-server (set KVC_TEST_REDIS_SERVER or put it on PATH)\n");
    return 77;
  }
  try {
    the_plugin = std::make_unique<StorePlugin>(KVC_REDIS_PLUGIN_PATH);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "kvc-redis-fault-tests: %s\n", e.what());
    return 1;
  }
  doctest::Context context(argc, argv);
  const int result = context.run();
  the_plugin.reset();
  return result;
}
