// put and remove: transactions on a value's keys (MULTI/EXEC, pipelined), guarded by WATCH on
// its manifest, so that a concurrent writer of the same key makes EXEC return nil (and the
// call try again) instead of leaving parts no manifest names. A put gives the parts it
// replaces kOldPartsGraceMs to live, for gets that read the old manifest; remove deletes.
#include <cstring>
#include <optional>
#include <vector>

#include "exchange.hpp"
#include "redis_store.hpp"
#include "value_layout.hpp"

namespace kvc::plugin::redis {
namespace {

// Tries of a write whose EXEC found the manifest changed by another writer.
constexpr int kWatchTries = 16;

std::vector<std::string> part_keys(const std::string& manifest, const Manifest& m) {
  std::vector<std::string> keys;
  keys.reserve(m.parts);
  for (uint64_t i = 0; i < m.parts; ++i) keys.push_back(part_key(manifest, m.generation, i));
  return keys;
}

}  // namespace

void RedisStore::put(const std::string& key, const void* data, size_t size) {
  const std::string manifest = manifest_key(settings_.key_prefix, key);
  const std::string doing = "put of key " + quoted(key);
  const Manifest next = make_manifest(size, settings_.part_bytes, new_generation(),
                                      value_checksum(data, size));
  const std::string next_manifest = encode(next);
  const std::vector<std::string> next_parts = part_keys(manifest, next);
  const char* bytes = static_cast<const char*>(data);
  const std::string grace = decimal(kOldPartsGraceMs);

  router_.run(manifest, [&](Connection& connection, bool asking) {
    for (int attempt = 0; attempt < kWatchTries; ++attempt) {
      Exchange watch(connection, asking);
      watch.add({"WATCH", manifest});
      watch.add({"GET", manifest});
      watch.send();
      const Reply watched = watch.receive();
      const Reply old = watch.receive();
      BrokenUnlessFinished watching(connection);
      check(*watched, connection, doing);
      check(*old, connection, doing);
      std::vector<std::string> old_parts;
      if (old->type == REDIS_REPLY_STRING) {
        std::string problem;
        // An unreadable old manifest names no parts: it is replaced, nothing else deleted.
        if (const std::optional<Manifest> previous = decode(text_of(*old), problem)) {
          if (previous->generation != next.generation) old_parts = part_keys(manifest, *previous);
        }
      }

      Exchange transaction(connection, asking);
      transaction.add({"MULTI"});
      for (uint64_t i = 0; i < next.parts; ++i) {
        transaction.add({"SET", next_parts[i],
                         std::string_view(bytes + i * next.part_bytes, next.part_size(i))},
                        false);
      }
      transaction.add({"SET", manifest, next_manifest}, false);
      for (const std::string& part : old_parts) {
        transaction.add({"PEXPIRE", part, grace}, false);
      }
      transaction.add({"EXEC"}, false);
      const size_t queued = next.parts + 1 + old_parts.size();
      transaction.send();
      const Reply multi = transaction.receive();
      Reply first_refused;  // a command refused while queueing aborts EXEC; it says why
      for (size_t i = 0; i < queued; ++i) {
        Reply reply = transaction.receive();
        if (is_error(*reply) && first_refused == nullptr) first_refused = std::move(reply);
      }
      const Reply exec = transaction.receive();
      watching.finished();  // EXEC, run or refused, ended the WATCH
      check(*multi, connection, doing);
      Redirect redirect;
      if (first_refused != nullptr && old->type == REDIS_REPLY_STRING &&
          parse_redirect(text_of(*first_refused), redirect) && redirect.ask) {
        // The slot is moving and the old value is still here: the new one cannot be written
        // beside it in one transaction on either node.
        throw PluginError(KVC_ERR_IO, doing + ": its hash slot " +
                                          decimal(static_cast<uint64_t>(redirect.slot)) +
                                          " is being migrated from " + connection.address() +
                                          " to " + redirect.address +
                                          " with the old value still on " +
                                          connection.address() + "; try again after it");
      }
      if (first_refused != nullptr) check(*first_refused, connection, doing);
      check(*exec, connection, doing);
      if (exec->type == REDIS_REPLY_ARRAY) {
        for (size_t i = 0; i < exec->elements; ++i) check(*exec->element[i], connection, doing);
        return;
      }
      if (exec->type != REDIS_REPLY_NIL) {
        throw PluginError(KVC_ERR_IO, doing + ": " + connection.address() +
                                          " answered EXEC with neither results nor nil");
      }
      // nil: another writer changed the manifest since WATCH; nothing of ours was written.
    }
    throw PluginError(KVC_ERR_IO, doing + ": other writers of the key replaced it " +
                                      decimal(kWatchTries) + " times during this put");
  });
}

void RedisStore::remove(const std::string& key) {
  const std::string manifest = manifest_key(settings_.key_prefix, key);
  const std::string doing = "remove of key " + quoted(key);

  router_.run(manifest, [&](Connection& connection, bool asking) {
    for (int attempt = 0; attempt < kWatchTries; ++attempt) {
      Exchange watch(connection, asking);
      watch.add({"WATCH", manifest});
      watch.add({"GET", manifest});
      watch.send();
      const Reply watched = watch.receive();
      const Reply old = watch.receive();
      BrokenUnlessFinished watching(connection);
      check(*watched, connection, doing);
      check(*old, connection, doing);
      if (old->type == REDIS_REPLY_NIL) {
        const Reply unwatched = connection.call({"UNWATCH"});
        watching.finished();
        check(*unwatched, connection, doing);
        fail(KVC_ERR_NOT_FOUND, "no value under key %s", quoted(key).c_str());
      }
      std::vector<std::string> parts;
      std::string problem;
      if (old->type == REDIS_REPLY_STRING) {
        if (const std::optional<Manifest> previous = decode(text_of(*old), problem)) {
          parts = part_keys(manifest, *previous);
        }
      }
      std::vector<std::string_view> del{"DEL", manifest};
      for (const std::string& part : parts) del.push_back(part);
      Exchange transaction(connection, asking);
      transaction.add({"MULTI"});
      transaction.add(del, false);
      transaction.add({"EXEC"}, false);
      transaction.send();
      const Reply multi = transaction.receive();
      const Reply queued = transaction.receive();
      const Reply exec = transaction.receive();
      watching.finished();
      check(*multi, connection, doing);
      check(*queued, connection, doing);
      check(*exec, connection, doing);
      if (exec->type == REDIS_REPLY_ARRAY) return;
      // nil: replaced meanwhile; remove what is there now.
    }
    throw PluginError(KVC_ERR_IO, doing + ": other writers of the key replaced it " +
                                      decimal(kWatchTries) + " times during this remove");
  });
}

}  // namespace kvc::plugin::redis
