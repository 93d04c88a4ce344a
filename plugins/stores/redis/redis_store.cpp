#include "redis_store.hpp"

#include <random>
#include <vector>

#include "exchange.hpp"
#include "value_layout.hpp"

namespace kvc::plugin::redis {

RedisStore::RedisStore(const StoreParams& params, const kvc_host_api* /*host*/)
    : settings_(read_settings(params)), router_(settings_) {
  std::random_device seed;
  generation_state_ = (uint64_t{seed()} << 32) ^ seed();
}

uint64_t RedisStore::new_generation() {
  // splitmix64 over a randomly seeded counter: distinct within this store, unpredictable
  // across processes writing the same keys.
  uint64_t z = generation_state_.fetch_add(0x9E3779B97F4A7C15ull) + 0x9E3779B97F4A7C15ull;
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

void RedisStore::check(const redisReply& reply, const Connection& connection,
                       const std::string& doing) {
  if (!is_error(reply)) return;
  Redirect redirect;
  if (parse_redirect(text_of(reply), redirect)) throw redirect;
  fail_on_error(text_of(reply), connection.address(), settings_.user(), doing);
}

}  // namespace kvc::plugin::redis

KVC_STORE_PLUGIN(kvc::plugin::redis::RedisStore);
