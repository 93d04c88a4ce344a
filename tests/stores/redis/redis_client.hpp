// The tests' own view of a Redis server, through hiredis and independent of the plugin: to
// look at the keys a store wrote, damage them, or change the server's settings.
#pragma once

#include <hiredis.h>

#include <cstdint>
#include <initializer_list>
#include <memory>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

namespace kvc::store_tests {

class RedisClient {
 public:
  RedisClient(const std::string& host, int port);
  ~RedisClient();
  RedisClient(const RedisClient&) = delete;
  RedisClient& operator=(const RedisClient&) = delete;

  struct Deleter {
    void operator()(redisReply* reply) const { freeReplyObject(reply); }
  };
  using Reply = std::unique_ptr<redisReply, Deleter>;

  // The reply (an error reply too); throws std::runtime_error when the connection fails.
  Reply command(std::initializer_list<std::string_view> args);
  // The reply as text (status, string or error); "(nil)" for nil, the decimal for integers.
  std::string text(std::initializer_list<std::string_view> args);
  // Every key matching `pattern` (SCAN, this node only).
  std::vector<std::string> keys(const std::string& pattern);

 private:
  redisContext* context_ = nullptr;
};

// Splits "host:port".
void split_host_port(const std::string& address, std::string& host, int& port);

// The manifest key and part keys of a value as docs/stores.md describes them, for a key
// without '%' or '}'.
std::string manifest_key_of(const std::string& prefix, const std::string& key);
// Generation (16 hex digits) and part count from a manifest's bytes.
struct ManifestFields {
  uint32_t version = 0;
  uint64_t size = 0;
  uint64_t part_bytes = 0;
  uint64_t parts = 0;
  std::string generation;
  uint64_t checksum = 0;
};
ManifestFields read_manifest(const std::string& bytes);
std::string part_key_of(const std::string& manifest_key, const ManifestFields& m, uint64_t i);

}  // namespace kvc::store_tests
