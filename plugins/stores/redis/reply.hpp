// A reply read by hiredis, and what an error reply means for the store's status codes.
#pragma once

#include <hiredis.h>

#include <memory>
#include <string>
#include <string_view>

namespace kvc::plugin::redis {

struct ReplyDeleter {
  void operator()(redisReply* reply) const noexcept { freeReplyObject(reply); }
};
using Reply = std::unique_ptr<redisReply, ReplyDeleter>;

inline bool is_error(const redisReply& reply) { return reply.type == REDIS_REPLY_ERROR; }
inline std::string_view text_of(const redisReply& reply) {
  return std::string_view(reply.str != nullptr ? reply.str : "", reply.len);
}

// A cluster node's -MOVED or -ASK: the key's slot is served elsewhere.
struct Redirect {
  bool ask;             // -ASK: this command only, on `address`, after ASKING
  int slot;
  std::string address;  // host:port
};

// Parses the text of an error reply "MOVED <slot> <host:port>" / "ASK <slot> <host:port>";
// false for other errors.
bool parse_redirect(std::string_view error, Redirect& out);

// Throws the Error the text of an error reply from `address` means (never returns):
//   OOM ...                        KVC_ERR_OUT_OF_MEMORY
//   WRONGPASS, NOAUTH, NOPERM ...  KVC_ERR_CONFIG (refused credentials), naming `user`
//   EXECABORT ... because of: X    as X says
//   anything else                  KVC_ERR_IO with the server's message
// `doing` says what the command was for ("put of key 'k'").
[[noreturn]] void fail_on_error(std::string_view error, const std::string& address,
                                const std::string& user, const std::string& doing);

}  // namespace kvc::plugin::redis
