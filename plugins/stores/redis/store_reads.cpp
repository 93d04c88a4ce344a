// get and exists. A get reads the manifest, then in one transaction (MULTI/EXEC) the parts it
// names and the manifest again: a snapshot, checked to be of the manifest read (else the value
// was replaced and is read again) before the caller's memory is reserved, since that happens
// once. Each part is copied once, from hiredis's reply into that memory, and the whole value's
// checksum checked.
#include <cstring>
#include <optional>
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
    auto read_manifest = [&](const redisReply& reply) {
      check(reply, connection, doing);
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
    auto [manifest_bytes, m] = read_manifest(*head.receive());

    for (int attempt = 0; attempt < kReplacedTries; ++attempt) {
      Reply parts;  // EXEC's array: the parts, then the manifest as it is now
      if (m.parts > 0) {
        Exchange snapshot(connection, asking);
        snapshot.add({"MULTI"});
        for (uint64_t i = 0; i < m.parts; ++i) {
          snapshot.add({"GET", part_key(manifest, m.generation, i)}, false);
        }
        snapshot.add({"GET", manifest}, false);
        snapshot.add({"EXEC"}, false);
        snapshot.send();
        const Reply multi = snapshot.receive();
        Reply first_refused;
        for (uint64_t i = 0; i <= m.parts; ++i) {
          Reply queued = snapshot.receive();
          if (is_error(*queued) && first_refused == nullptr) first_refused = std::move(queued);
        }
        parts = snapshot.receive();
        check(*multi, connection, doing);
        if (first_refused != nullptr) check(*first_refused, connection, doing);
        check(*parts, connection, doing);
        if (parts->type != REDIS_REPLY_ARRAY || parts->elements != m.parts + 1) {
          throw PluginError(KVC_ERR_IO, doing + ": " + connection.address() +
                                            " answered EXEC with an unexpected reply");
        }
        const redisReply& now = *parts->element[m.parts];
        if (now.type != REDIS_REPLY_STRING || text_of(now) != manifest_bytes) {
          // Replaced (or removed) since the manifest was read: read what is there now.
          std::tie(manifest_bytes, m) = read_manifest(now);
          continue;
        }
        for (uint64_t i = 0; i < m.parts; ++i) {
          const redisReply& part = *parts->element[i];
          if (part.type != REDIS_REPLY_STRING) {
            throw PluginError(KVC_ERR_IO, doing + ": incomplete value: part " + decimal(i) +
                                              " of " + decimal(m.parts) + " missing at " +
                                              connection.address());
          }
          if (part.len != m.part_size(i)) {
            throw PluginError(KVC_ERR_IO, doing + ": corrupt value at " + connection.address() +
                                              ": part " + decimal(i) + " of " +
                                              decimal(m.parts) + " has " + decimal(part.len) +
                                              " bytes, the manifest says " +
                                              decimal(m.part_size(i)));
          }
        }
      }
      char* out = static_cast<char*>(buffer.reserve(static_cast<size_t>(m.size)));
      for (uint64_t i = 0; i < m.parts; ++i) {
        std::memcpy(out + i * m.part_bytes, parts->element[i]->str, parts->element[i]->len);
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
