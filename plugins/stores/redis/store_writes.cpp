// put and remove: one transaction on a value's keys (MULTI/EXEC, pipelined) that swaps or
// deletes its manifest and returns the one it replaced (SET ... GET, GETDEL), so each call
// knows exactly which parts it made unreachable, with no WATCH to conflict on. The call reads
// the manifest first and deals with those parts in the same transaction; when another writer
// got in between (the manifest returned is not the one read), it deals with the parts
// actually replaced right after. A put gives the parts it replaces kOldPartsGraceMs to live,
// for gets that read the old manifest just before; remove deletes them.
#include <optional>
#include <string>
#include <vector>

#include "exchange.hpp"
#include "redis_store.hpp"
#include "value_layout.hpp"

namespace kvc::plugin::redis {
namespace {

// The parts a manifest reply names: none for nil or for what is no manifest (it is replaced
// or deleted alone).
std::vector<std::string> parts_named(const std::string& manifest, const redisReply& reply) {
  std::vector<std::string> keys;
  if (reply.type != REDIS_REPLY_STRING) return keys;
  std::string problem;
  const std::optional<Manifest> m = decode(text_of(reply), problem);
  if (!m) return keys;
  keys.reserve(m->parts);
  for (uint64_t i = 0; i < m->parts; ++i) keys.push_back(part_key(manifest, m->generation, i));
  return keys;
}

bool same_bytes(const redisReply& a, const redisReply& b) {
  return a.type == b.type && (a.type != REDIS_REPLY_STRING || text_of(a) == text_of(b));
}

}  // namespace

RedisStore::Seen RedisStore::current_manifest(Connection& connection, bool asking,
                                              const std::string& manifest,
                                              const std::string& doing) {
  Exchange head(connection, asking);
  head.add({"GET", manifest});
  head.send();
  Seen seen{head.receive(), true};
  Redirect redirect;
  if (is_error(*seen.reply) && parse_redirect(text_of(*seen.reply), redirect) && redirect.ask) {
    seen.reply = router_.ask(redirect.address, {"GET", manifest});
    seen.here = false;
  }
  check(*seen.reply, connection, doing);
  return seen;
}

Reply RedisStore::transaction(Connection& connection, bool asking,
                              const std::vector<std::vector<std::string_view>>& commands,
                              bool old_value_here, const std::string& doing) {
  Exchange exchange(connection, asking);
  exchange.add({"MULTI"});
  for (const auto& command : commands) exchange.add(command, false);
  exchange.add({"EXEC"}, false);
  exchange.send();
  const Reply multi = exchange.receive();
  Reply first_refused;
  for (size_t i = 0; i < commands.size(); ++i) {
    Reply reply = exchange.receive();
    if (is_error(*reply) && first_refused == nullptr) first_refused = std::move(reply);
  }
  Reply exec = exchange.receive();
  check(*multi, connection, doing);
  Redirect redirect;
  if (first_refused != nullptr && old_value_here &&
      parse_redirect(text_of(*first_refused), redirect) && redirect.ask) {
    // The slot is moving and the old value is still here: the new one cannot be written
    // beside it in one transaction on either node.
    throw Error(KVC_ERR_IO, doing + ": its hash slot " +
                                      decimal(static_cast<uint64_t>(redirect.slot)) +
                                      " is being migrated from " + connection.address() + " to " +
                                      redirect.address + " with the old value still on " +
                                      connection.address() + "; try again after it");
  }
  if (first_refused != nullptr) check(*first_refused, connection, doing);
  check(*exec, connection, doing);
  if (exec->type != REDIS_REPLY_ARRAY || exec->elements != commands.size()) {
    throw Error(KVC_ERR_IO, doing + ": " + connection.address() +
                                      " answered EXEC with an unexpected reply");
  }
  return exec;
}

void RedisStore::on_each(Connection& connection, bool asking, std::string_view command,
                         const std::vector<std::string>& keys, const std::string& argument,
                         const std::string& doing) {
  if (keys.empty()) return;
  Exchange exchange(connection, asking);
  for (const std::string& key : keys) {
    if (argument.empty()) {
      exchange.add({command, key});
    } else {
      exchange.add({command, key, argument});
    }
  }
  exchange.send();
  std::vector<Reply> replies;
  for (size_t i = 0; i < keys.size(); ++i) replies.push_back(exchange.receive());
  for (const Reply& reply : replies) check(*reply, connection, doing);
}

void RedisStore::wait_for_replicas(Connection& connection, const std::string& doing) {
  if (settings_.wait_replicas == 0) return;
  Exchange exchange(connection, false);
  const std::string replicas = decimal(static_cast<uint64_t>(settings_.wait_replicas));
  exchange.add({"WAIT", replicas, decimal(static_cast<uint64_t>(settings_.wait_timeout_ms))});
  exchange.send();
  const Reply reply = exchange.receive();
  check(*reply, connection, doing);
  if (reply->type != REDIS_REPLY_INTEGER) {
    throw Error(KVC_ERR_IO, doing + ": " + connection.address() +
                                      " answered WAIT with an unexpected reply");
  }
  if (reply->integer < settings_.wait_replicas) {
    throw Error(KVC_ERR_IO, doing + ": " + decimal(static_cast<uint64_t>(reply->integer)) +
                                      " of the " + replicas + " replicas asked for (wait_replicas) "
                                      "acknowledged it within " +
                                      decimal(static_cast<uint64_t>(settings_.wait_timeout_ms)) +
                                      " ms; it is on " + connection.address() + " only so far");
  }
}

void RedisStore::put(const std::string& key, const void* data, size_t size) {
  const std::string manifest = manifest_key(settings_.key_prefix, key);
  const std::string doing = "put of key " + quoted(key);
  const Manifest next = make_manifest(size, settings_.part_bytes, new_generation(),
                                      value_checksum(data, size));
  const std::string next_manifest = encode(next);
  std::vector<std::string> next_parts;
  next_parts.reserve(next.parts);
  for (uint64_t i = 0; i < next.parts; ++i) {
    next_parts.push_back(part_key(manifest, next.generation, i));
  }
  const char* bytes = static_cast<const char*>(data);
  const std::string grace = decimal(kOldPartsGraceMs);

  router_.run(manifest, [&](Connection& connection, bool asking) {
    const Seen seen = current_manifest(connection, asking, manifest, doing);
    const std::vector<std::string> seen_parts = parts_named(manifest, *seen.reply);
    std::vector<std::vector<std::string_view>> commands;
    for (uint64_t i = 0; i < next.parts; ++i) {
      commands.push_back({"SET", next_parts[i],
                          std::string_view(bytes + i * next.part_bytes, next.part_size(i))});
    }
    commands.push_back({"SET", manifest, next_manifest, "GET"});
    for (const std::string& part : seen_parts) commands.push_back({"PEXPIRE", part, grace});
    const Reply results = transaction(connection, asking, commands,
                                      seen.here && seen.reply->type == REDIS_REPLY_STRING, doing);
    for (size_t i = 0; i < results->elements; ++i) check(*results->element[i], connection, doing);
    const redisReply& replaced = *results->element[next.parts];
    if (!same_bytes(replaced, *seen.reply)) {
      // Another put got in between: the parts this one made unreachable are that one's.
      on_each(connection, asking, "PEXPIRE", parts_named(manifest, replaced), grace, doing);
    }
    wait_for_replicas(connection, doing);
  });
}

void RedisStore::remove(const std::string& key) {
  const std::string manifest = manifest_key(settings_.key_prefix, key);
  const std::string doing = "remove of key " + quoted(key);

  router_.run(manifest, [&](Connection& connection, bool asking) {
    const Seen seen = current_manifest(connection, asking, manifest, doing);
    if (seen.reply->type == REDIS_REPLY_NIL) {
      fail(KVC_ERR_NOT_FOUND, "no value under key %s", quoted(key).c_str());
    }
    const std::vector<std::string> seen_parts = parts_named(manifest, *seen.reply);
    std::vector<std::vector<std::string_view>> commands{{"GETDEL", manifest}};
    if (!seen_parts.empty()) {
      commands.emplace_back(std::vector<std::string_view>{"DEL"});
      for (const std::string& part : seen_parts) commands.back().push_back(part);
    }
    const Reply results = transaction(connection, asking, commands, seen.here, doing);
    for (size_t i = 0; i < results->elements; ++i) check(*results->element[i], connection, doing);
    const redisReply& removed = *results->element[0];
    if (removed.type == REDIS_REPLY_NIL) {
      fail(KVC_ERR_NOT_FOUND, "no value under key %s", quoted(key).c_str());
    }
    if (!same_bytes(removed, *seen.reply)) {
      on_each(connection, asking, "DEL", parts_named(manifest, removed), "", doing);
    }
    wait_for_replicas(connection, doing);
  });
}

}  // namespace kvc::plugin::redis
