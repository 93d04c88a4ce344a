// The `redis` store: values in Redis or Valkey (>= 7), one node or a Redis Cluster, laid out
// as value_layout.hpp says. Calls from several threads run in parallel on pooled connections.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "common/store_support.hpp"
#include "reply.hpp"
#include "router.hpp"
#include "settings.hpp"
#include "value_layout.hpp"

namespace kvc::plugin::redis {

class RedisStore {
 public:
  static constexpr const char* kName = "redis";
  static constexpr const char* kLabel = "redis store";
  static constexpr const char* kParams[] = {
      "host", "port",       "unix_socket", "nodes",      "username", "password_env",
      "db",   "timeout_ms", "part_bytes",  "key_prefix", "pool",
      "wait_replicas", "wait_timeout_ms"};

  RedisStore(const StoreParams& params, const kvc_host_api* host);

  void put(const std::string& key, const void* data, size_t size);
  void get(const std::string& key, ValueBuffer& buffer);
  bool exists(const std::string& key);
  void remove(const std::string& key);

 private:
  // What read_parts() found wrong, beside what it threw for.
  struct PartsRead {
    std::optional<uint64_t> missing;        // the first part without a value
    std::optional<std::string> wrong_size;  // the first part of the wrong length, described
    void note_wrong_size(uint64_t i, const Manifest& m, size_t size);
  };
  // Reads the parts of `m` into `out` (m.size bytes).
  PartsRead read_parts(Connection& connection, bool asking, const std::string& manifest,
                       const Manifest& m, char* out, const std::string& doing);

  // The manifest now (nil when none), and whether it is on this node (not on the one a
  // migrating slot's -ASK named).
  struct Seen {
    Reply reply;
    bool here;
  };
  Seen current_manifest(Connection& connection, bool asking, const std::string& manifest,
                        const std::string& doing);
  // MULTI, `commands`, EXEC; EXEC's array. A command refused while queueing is thrown.
  Reply transaction(Connection& connection, bool asking,
                    const std::vector<std::vector<std::string_view>>& commands,
                    bool old_value_here, const std::string& doing);
  // `command` (with `argument` unless empty) on each of `keys`, pipelined.
  void on_each(Connection& connection, bool asking, std::string_view command,
               const std::vector<std::string>& keys, const std::string& argument,
               const std::string& doing);

  // WAIT for settings_.wait_replicas replicas to acknowledge this connection's writes; IO
  // naming the node and the count when fewer do in time. Nothing when wait_replicas is 0.
  void wait_for_replicas(Connection& connection, const std::string& doing);

  uint64_t new_generation();
  // Throws what an error reply means: Redirect for -MOVED/-ASK, else fail_on_error().
  void check(const redisReply& reply, const Connection& connection, const std::string& doing);

  const Settings settings_;
  Router router_;
  std::atomic<uint64_t> generation_state_;
};

}  // namespace kvc::plugin::redis
