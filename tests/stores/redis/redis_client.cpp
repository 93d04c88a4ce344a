#include "redis_client.hpp"

#include <sys/time.h>

#include <cinttypes>
#include <cstdio>
#include <cstdlib>
#include <cstring>

namespace kvc::store_tests {

RedisClient::RedisClient(const std::string& host, int port) {
  const timeval timeout{10, 0};
  context_ = redisConnectWithTimeout(host.c_str(), port, timeout);
  if (context_ == nullptr || context_->err != 0) {
    const std::string why = context_ != nullptr ? context_->errstr : "out of memory";
    if (context_ != nullptr) redisFree(context_);
    throw std::runtime_error("cannot connect to " + host + ":" + std::to_string(port) + ": " +
                             why);
  }
  redisSetTimeout(context_, timeout);
}

RedisClient::~RedisClient() { redisFree(context_); }

RedisClient::Reply RedisClient::command(std::initializer_list<std::string_view> args) {
  std::vector<const char*> argv;
  std::vector<size_t> lengths;
  for (std::string_view arg : args) {
    argv.push_back(arg.data());
    lengths.push_back(arg.size());
  }
  void* reply = redisCommandArgv(context_, static_cast<int>(argv.size()), argv.data(),
                                 lengths.data());
  if (reply == nullptr) throw std::runtime_error(std::string("redis: ") + context_->errstr);
  return Reply(static_cast<redisReply*>(reply));
}

std::string RedisClient::text(std::initializer_list<std::string_view> args) {
  const Reply reply = command(args);
  switch (reply->type) {
    case REDIS_REPLY_NIL:
      return "(nil)";
    case REDIS_REPLY_INTEGER:
      return std::to_string(reply->integer);
    case REDIS_REPLY_ARRAY:
      return "(array)";
    default:
      return std::string(reply->str, reply->len);
  }
}

std::vector<std::string> RedisClient::keys(const std::string& pattern) {
  std::vector<std::string> found;
  std::string cursor = "0";
  do {
    const Reply reply = command({"SCAN", cursor, "MATCH", pattern, "COUNT", "1000"});
    if (reply->type != REDIS_REPLY_ARRAY || reply->elements != 2) {
      throw std::runtime_error("SCAN did not return [cursor, keys]");
    }
    cursor.assign(reply->element[0]->str, reply->element[0]->len);
    const redisReply* batch = reply->element[1];
    for (size_t i = 0; i < batch->elements; ++i) {
      found.emplace_back(batch->element[i]->str, batch->element[i]->len);
    }
  } while (cursor != "0");
  return found;
}

void split_host_port(const std::string& address, std::string& host, int& port) {
  const size_t colon = address.rfind(':');
  if (colon == std::string::npos) throw std::runtime_error("not host:port: " + address);
  host = address.substr(0, colon);
  port = std::atoi(address.c_str() + colon + 1);
}

std::string manifest_key_of(const std::string& prefix, const std::string& key) {
  return prefix + "{" + key + "}";
}

ManifestFields read_manifest(const std::string& bytes) {
  if (bytes.size() != 48 || bytes.compare(0, 4, "KVCR") != 0) {
    throw std::runtime_error("not a 48-byte KVCR manifest");
  }
  auto u64 = [&](size_t at) {
    uint64_t value = 0;
    for (int i = 7; i >= 0; --i) value = (value << 8) | static_cast<unsigned char>(bytes[at + i]);
    return value;
  };
  ManifestFields m;
  m.version = static_cast<uint32_t>(u64(4) & 0xFFFFFFFFu);
  m.size = u64(8);
  m.part_bytes = u64(16);
  m.parts = u64(24);
  char hex[17];
  std::snprintf(hex, sizeof hex, "%016" PRIx64, u64(32));
  m.generation = hex;
  m.checksum = u64(40);
  return m;
}

std::string part_key_of(const std::string& manifest_key, const ManifestFields& m, uint64_t i) {
  return manifest_key + ":" + m.generation + ":" + std::to_string(i);
}

}  // namespace kvc::store_tests
