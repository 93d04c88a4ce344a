// get and exists. A get reads the manifest, reserves the caller's memory, reads the parts it
// names into that memory (pipelined, from the socket straight into the memory: RawReader)
// and checks the whole value's checksum. Parts are written once under their generation, and
// a put that replaces a value leaves the old parts for kOldPartsGraceMs (value_layout.hpp),
// so a get that read the manifest just before finds them; a missing part is told from a
// replaced value by reading the manifest again.
#include <cstring>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "exchange.hpp"
#include "raw_reader.hpp"
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
      throw Error(KVC_ERR_IO, connection.address() + ": EXISTS did not return a number");
    }
    return reply->integer != 0;
  });
}

void RedisStore::get(const std::string& key, ValueBuffer& buffer) {
  const std::string manifest = manifest_key(settings_.key_prefix, key);
  const std::string doing = "get of key " + quoted(key);
  // Kept across redirections: the caller's memory is reserved once.
  std::optional<uint64_t> reserved_size;
  char* out = nullptr;

  router_.run(manifest, [&](Connection& connection, bool asking) {
    auto read_manifest = [&]() {
      Exchange head(connection, asking);
      head.add({"GET", manifest});
      head.send();
      Reply reply = head.receive();
      Redirect redirect;
      if (is_error(*reply) && parse_redirect(text_of(*reply), redirect) && redirect.ask) {
        reply = router_.ask(redirect.address, {"GET", manifest});
      }
      check(*reply, connection, doing);
      if (reply->type == REDIS_REPLY_NIL) {
        fail(KVC_ERR_NOT_FOUND, "no value under key %s", quoted(key).c_str());
      }
      std::string problem = "is not a string";
      const std::optional<Manifest> m =
          reply->type == REDIS_REPLY_STRING ? decode(text_of(*reply), problem) : std::nullopt;
      if (!m) {
        throw Error(KVC_ERR_IO, doing + ": the manifest " + quoted(manifest) + " at " +
                                          connection.address() + " " + problem);
      }
      return *m;
    };

    Manifest m = read_manifest();
    for (int attempt = 0; attempt < kReplacedTries; ++attempt) {
      if (!reserved_size) {
        out = static_cast<char*>(buffer.reserve(static_cast<size_t>(m.size)));
        reserved_size = m.size;
      } else if (*reserved_size != m.size) {
        throw Error(KVC_ERR_IO, doing + ": the value was replaced by one of another size "
                                          "while being read; read it again");
      }
      const PartsRead parts = read_parts(connection, asking, manifest, m, out, doing);
      if (parts.missing) {
        // Removed, replaced (and its old parts expired), or damaged: the manifest tells.
        const Manifest now = read_manifest();
        if (now.generation != m.generation) {
          m = now;
          continue;
        }
        throw Error(KVC_ERR_IO, doing + ": incomplete value: part " +
                                          decimal(*parts.missing) + " of " + decimal(m.parts) +
                                          " missing at " + connection.address());
      }
      if (parts.wrong_size) {
        throw Error(KVC_ERR_IO, doing + ": corrupt value at " + connection.address() +
                                          ": " + *parts.wrong_size);
      }
      if (value_checksum(out, static_cast<size_t>(m.size)) != m.checksum) {
        throw Error(KVC_ERR_IO, doing + ": checksum mismatch: the value at " +
                                          connection.address() + " (" + decimal(m.size) +
                                          " bytes) is corrupt");
      }
      return;
    }
    throw Error(KVC_ERR_IO, doing + ": the value was replaced " +
                                      decimal(kReplacedTries) + " times while being read");
  });
}

RedisStore::PartsRead RedisStore::read_parts(Connection& connection, bool asking,
                                             const std::string& manifest, const Manifest& m,
                                             char* out, const std::string& doing) {
  PartsRead result;
  if (m.parts == 0) return result;
  std::vector<std::string> keys;
  keys.reserve(m.parts);
  CommandBatch batch;
  for (uint64_t i = 0; i < m.parts; ++i) {
    keys.push_back(part_key(manifest, m.generation, i));
    if (asking) batch.add({"ASKING"});
    batch.add({"GET", keys.back()});
  }
  // Every reply due is to this batch, so RawReader may read the socket itself.
  if (!connection.reader_drained()) {
    fail(KVC_ERR_INTERNAL, "hiredis holds unread bytes of %s", connection.address().c_str());
  }
  connection.send(batch);
  BrokenUnlessFinished pending(connection);

  std::optional<std::string> refused;                        // the first error but -ASK
  std::vector<std::pair<uint64_t, std::string>> moved_away;  // -ASK: part, node
  RawReader reader(connection);
  for (uint64_t i = 0; i < m.parts; ++i) {
    if (asking) reader.next(nullptr, 0);  // ASKING's +OK
    const RawReader::Reply reply = reader.next(out + i * m.part_bytes, m.part_size(i));
    if (reply.kind == RawReader::Reply::kBulk && reply.size != m.part_size(i)) {
      result.note_wrong_size(i, m, reply.size);
    } else if (reply.kind == RawReader::Reply::kError) {
      Redirect redirect;
      if (parse_redirect(reply.text, redirect) && redirect.ask) {
        moved_away.emplace_back(i, redirect.address);
      } else if (!refused) {
        refused = reply.text;
      }
    } else if (reply.kind != RawReader::Reply::kBulk && !result.missing) {
      result.missing = i;
    }
  }
  pending.finished();
  if (refused) {
    Redirect redirect;
    if (parse_redirect(*refused, redirect)) throw redirect;
    fail_on_error(*refused, connection.address(), settings_.user(), doing);
  }
  // Parts of a slot being migrated that went ahead to the importing node.
  for (const auto& [i, address] : moved_away) {
    const Reply reply = router_.ask(address, {"GET", keys[i]});
    if (is_error(*reply)) fail_on_error(text_of(*reply), address, settings_.user(), doing);
    if (reply->type != REDIS_REPLY_STRING) {
      if (!result.missing) result.missing = i;
    } else if (reply->len != m.part_size(i)) {
      result.note_wrong_size(i, m, reply->len);
    } else {
      std::memcpy(out + i * m.part_bytes, reply->str, reply->len);
    }
  }
  return result;
}

void RedisStore::PartsRead::note_wrong_size(uint64_t i, const Manifest& m, size_t size) {
  if (wrong_size) return;
  wrong_size = "part " + decimal(i) + " of " + decimal(m.parts) + " has " + decimal(size) +
               " bytes, the manifest says " + decimal(m.part_size(i));
}

}  // namespace kvc::plugin::redis
