// get and exists. A get reads the manifest, then pipelined the parts it names and the manifest
// again. Parts are written once under their generation, so when the manifest did not change
// the parts read are its own; when it did, the value was replaced meanwhile and is read
// again. All this happens before the caller's memory is reserved, since that happens once;
// then each part is copied once, from hiredis's reply into that memory, and the whole value's
// checksum checked.
#include <cstring>
#include <optional>
#include <vector>
#include <tuple>
#include <utility>

#include "exchange.hpp"
#include "redis_store.hpp"
#include "value_layout.hpp"

namespace kvc::plugin::redis {
namespace {

// Reads of a value that other writers keep replacing between its manifest and its parts.
constexpr int kReplacedTries = 8;

}  // namespace

bool RedisStore::exists(const std::string& key) {
  const std::string manifest = manifest_key(settings_.key_prefix, key);
  return router_.run(manifest, [&](Connection& connection, bool asking) {
    Exchange exchange(connection, asking);
    exchange.add({"EXISTS", manifest});
    exchange.send();
    const Reply reply = exchange.receive();
    check(*reply, connection, "exists of key " + quoted(key));
    if (reply->type != REDIS_REPLY_INTEGER) {
      throw PluginError(KVC_ERR_IO, connection.address() + ": EXISTS did not return a number");
    }
    return reply->integer != 0;
  });
}

void RedisStore::get(const std::string& key, ValueBuffer& buffer) {
  const std::string manifest = manifest_key(settings_.key_prefix, key);
  const std::string doing = "get of key " + quoted(key);

  router_.run(manifest, [&](Connection& connection, bool asking) {
    // A reply of the pipeline below; a key whose slot is being migrated and that has moved
    // already (-ASK) is read from the node it went to.
    auto settled = [&](Reply reply, const std::string& key_read) {
      Redirect redirect;
      if (is_error(*reply) && parse_redirect(text_of(*reply), redirect) && redirect.ask) {
        reply = router_.ask(redirect.address, {"GET", key_read});
        Redirect again;
        if (is_error(*reply) && parse_redirect(text_of(*reply), again)) throw again;
        if (is_error(*reply)) {
          fail_on_error(text_of(*reply), redirect.address, settings_.user(), doing);
        }
        return reply;
      }
      check(*reply, connection, doing);
      return reply;
    };
    auto read_manifest = [&](const redisReply& reply) {
      if (reply.type == REDIS_REPLY_NIL) {
        fail(KVC_ERR_NOT_FOUND, "no value under key %s", quoted(key).c_str());
      }
      std::string problem = "is not a string";
      std::optional<Manifest> m =
          reply.type == REDIS_REPLY_STRING ? decode(text_of(reply), problem) : std::nullopt;
      if (!m) {
        throw PluginError(KVC_ERR_IO, doing + ": the manifest " + quoted(manifest) + " at " +
                                          connection.address() + " " + problem);
      }
      return std::make_pair(std::string(text_of(reply)), *m);
    };
    Exchange head(connection, asking);
    head.add({"GET", manifest});
    head.send();
    auto [manifest_bytes, m] = read_manifest(*settled(head.receive(), manifest));

    for (int attempt = 0; attempt < kReplacedTries; ++attempt) {
      std::vector<std::string> keys;
      keys.reserve(m.parts);
      Exchange pipeline(connection, asking);
      for (uint64_t i = 0; i < m.parts; ++i) {
        keys.push_back(part_key(manifest, m.generation, i));
        pipeline.add({"GET", keys.back()});
      }
      if (m.parts > 0) pipeline.add({"GET", manifest});
      pipeline.send();
      std::vector<Reply> parts;
      parts.reserve(m.parts);
      for (uint64_t i = 0; i < m.parts; ++i) parts.push_back(pipeline.receive());
      Reply now = m.parts > 0 ? pipeline.receive() : nullptr;
      // Every reply is read: errors may now be thrown.
      for (uint64_t i = 0; i < m.parts; ++i) parts[i] = settled(std::move(parts[i]), keys[i]);
      if (now != nullptr) {
        now = settled(std::move(now), manifest);
        if (now->type != REDIS_REPLY_STRING || text_of(*now) != manifest_bytes) {
          // Replaced (or removed) since the manifest was read: read what is there now.
          std::tie(manifest_bytes, m) = read_manifest(*now);
          continue;
        }
      }
      // The manifest did not change: its generation's parts, written once, are all there
      // unless the value is damaged.
      for (uint64_t i = 0; i < m.parts; ++i) {
        const redisReply& part = *parts[i];
        if (part.type != REDIS_REPLY_STRING) {
          throw PluginError(KVC_ERR_IO, doing + ": incomplete value: part " + decimal(i) +
                                            " of " + decimal(m.parts) + " missing at " +
                                            connection.address());
        }
        if (part.len != m.part_size(i)) {
          throw PluginError(KVC_ERR_IO, doing + ": corrupt value at " + connection.address() +
                                            ": part " + decimal(i) + " of " + decimal(m.parts) +
                                            " has " + decimal(part.len) +
                                            " bytes, the manifest says " +
                                            decimal(m.part_size(i)));
        }
      }
      char* out = static_cast<char*>(buffer.reserve(static_cast<size_t>(m.size)));
      for (uint64_t i = 0; i < m.parts; ++i) {
        std::memcpy(out + i * m.part_bytes, parts[i]->str, parts[i]->len);
      }
      if (value_checksum(out, static_cast<size_t>(m.size)) != m.checksum) {
        throw PluginError(KVC_ERR_IO, doing + ": checksum mismatch: the value at " +
                                          connection.address() + " (" + decimal(m.size) +
                                          " bytes) is corrupt");
      }
      return;
    }
    throw PluginError(KVC_ERR_IO, doing + ": the value was replaced " +
                                      decimal(kReplacedTries) + " times while being read");
  });
}

}  // namespace kvc::plugin::redis
