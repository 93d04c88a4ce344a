// The CPU backend runs the kernel set KVC_CPU_KERNELS names where this CPU can, refuses to
// create a cache where it cannot (or where the name is no set), naming the set and what is
// missing, and picks the best set this CPU runs when the variable is unset. CTest runs this
// file with each value (tests/kernels/CMakeLists.txt); the expectation comes from
// __builtin_cpu_supports, independently of the backend's CPUID checks.
#include <doctest/doctest.h>

#include <cstdlib>
#include <string>
#include <vector>

#include "kernels/cpu_sets.hpp"
#include "test_support.hpp"

namespace {

struct Messages {
  std::vector<std::string> debug;
};

void keep(void* user, kvc_log_level, const char* message) {
  static_cast<Messages*>(user)->debug.emplace_back(message);
}

}  // namespace

TEST_CASE("cpu kernels: the backend runs the set KVC_CPU_KERNELS names, or refuses") {
  if (kvt::test_backend() != nullptr) return;  // only the cpu backend reads the variable
  const char* forced = std::getenv("KVC_CPU_KERNELS");
  std::string expected_set;
  std::string lacks;  // why the backend must refuse; empty: it must not
  if (forced == nullptr || *forced == '\0') {
    for (const char* set : kvt::kKernelSets) {
      if (kvt::cpu_runs_kernels(set)) {
        expected_set = set;
        break;
      }
    }
  } else if (const char* missing = kvt::cpu_lacks_for_kernels(forced)) {
    expected_set = forced;
    lacks = missing;
  } else {
    lacks = "names no kernel set";
  }
  INFO("KVC_CPU_KERNELS=" << (forced ? forced : "(unset)") << ", expected set " << expected_set);

  kvt::ContextPtr ctx = kvt::make_context();
  Messages messages;
  kvc_context_set_logger(ctx.get(), keep, &messages, KVC_LOG_DEBUG);
  kvc_cache_params p;
  kvc_cache_params_init(&p);
  p.layers = 1;
  p.kv_heads = 1;
  p.q_heads = 1;
  p.head_dim = 8;
  p.dtype = KVC_DTYPE_F32;
  kvc_cache* cache = nullptr;
  kvt::Status st{kvc_cache_create(ctx.get(), &p, &cache)};
  kvc_context_set_logger(ctx.get(), nullptr, nullptr, KVC_LOG_WARN);
  if (lacks.empty()) {
    REQUIRE_MESSAGE(st.ok(), st.describe());
    kvt::CachePtr owned(cache);
    const std::string line = "cpu backend: " + expected_set + " kernels";
    bool logged = false;
    for (const std::string& m : messages.debug) logged = logged || m.find(line) != std::string::npos;
    CHECK_MESSAGE(logged, "no debug message \"" << line << "\"");
  } else {
    CHECK(cache == nullptr);
    REQUIRE(!st.ok());
    INFO(st.describe());
    CHECK(st.message().find(std::string("KVC_CPU_KERNELS=") + forced) != std::string::npos);
    CHECK(st.message().find(lacks) != std::string::npos);
  }
}
