// The prefix cache's index on its own (core/src/prefix_index.*), over a real pool: a key that
// another prompt's block holds (a hash collision, which SHA-256 keys make impossible to produce
// through the C API) never matches, and a publish stops there.
#include <doctest/doctest.h>

#include <string>
#include <vector>

#include "backend.hpp"
#include "block_pool.hpp"
#include "context.hpp"
#include "prefix_index.hpp"

namespace {

constexpr int32_t kBlock = 4;

struct Pool {
  kvc::Context context{kvc::Config{}};
  std::unique_ptr<kvc::Backend> backend;
  std::unique_ptr<kvc::BlockPool> pool;

  Pool() {
    if (!context.plugins().find(KVC_PLUGIN_BACKEND, "cpu")) {
      context.plugins().load_library(KVC_TEST_CPU_BACKEND_PLUGIN);
    }
    const kvc::LoadedPlugin* cpu = context.plugins().find(KVC_PLUGIN_BACKEND, "cpu");
    REQUIRE(cpu != nullptr);
    kvc::CacheConfig config;
    config.q_heads = 1;
    backend = std::make_unique<kvc::Backend>(*cpu, context.host().api(), config);
    pool = std::make_unique<kvc::BlockPool>(*backend, size_t{1} << 20, 256);
  }
};

}  // namespace

TEST_CASE("prefix index: a key another prompt's block holds is no match, and a publish stops there") {
  Pool p;
  const std::vector<int32_t> ours = {1, 2, 3, 4, 5, 6, 7, 8};
  const std::vector<int32_t> theirs = {1, 2, 3, 4, 9, 9, 9, 9};
  std::vector<void*> blocks = p.pool->take_blocks(3);
  {
    kvc::PrefixIndex index(*p.pool, kBlock);
    // Our two blocks; their second block collides with our second's key.
    const std::vector<kvc::PrefixLink> our_links = {{"k0", ours.data()}, {"k1", ours.data() + 4}};
    CHECK(index.publish(our_links, {{blocks[0]}, {blocks[1]}}) == 2);
    CHECK(index.match(our_links) == 2);
    const std::vector<kvc::PrefixLink> their_links = {{"k0", theirs.data()},
                                                      {"k1", theirs.data() + 4}};
    CHECK(index.match(their_links) == 1);
    CHECK(index.attach(their_links).size() == 1);
    p.pool->give_back_block(blocks[0]);  // the attach's share
    CHECK(index.publish(their_links, {{blocks[0]}, {blocks[2]}}) == 1);
    // Under another parent, the same tokens and key are another block too.
    const std::vector<kvc::PrefixLink> orphan = {{"k1", ours.data() + 4}};
    CHECK(index.match(orphan) == 0);
    for (void* b : blocks) p.pool->give_back_block(b);
    CHECK(p.pool->counters().bytes_cached == 2 * 256);  // ours, held by the index alone
  }
  CHECK(p.pool->counters().bytes_used == 0);
}
