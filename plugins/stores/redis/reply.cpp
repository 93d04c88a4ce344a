#include "reply.hpp"

#include <cstdlib>

#include "common/store_support.hpp"

namespace kvc::plugin::redis {
namespace {

bool starts_with(std::string_view text, std::string_view prefix) {
  return text.substr(0, prefix.size()) == prefix;
}

}  // namespace

bool parse_redirect(std::string_view text, Redirect& out) {
  bool ask = false;
  std::string_view rest;
  if (starts_with(text, "MOVED ")) {
    rest = text.substr(6);
  } else if (starts_with(text, "ASK ")) {
    ask = true;
    rest = text.substr(4);
  } else {
    return false;
  }
  const size_t space = rest.find(' ');
  if (space == std::string_view::npos || space == 0 || space + 1 >= rest.size()) return false;
  const std::string slot(rest.substr(0, space));
  char* end = nullptr;
  const long value = std::strtol(slot.c_str(), &end, 10);
  if (*end != '\0' || value < 0 || value >= 16384) return false;
  out.ask = ask;
  out.slot = static_cast<int>(value);
  out.address = std::string(rest.substr(space + 1));
  return true;
}

void fail_on_error(std::string_view error, const std::string& address, const std::string& user,
                   const std::string& doing) {
  // "EXECABORT Transaction discarded because of: OOM command not allowed ...": EXEC itself was
  // refused; what refused it decides the code.
  constexpr std::string_view kAbortedBecause = "EXECABORT Transaction discarded because of: ";
  const std::string_view cause =
      starts_with(error, kAbortedBecause) ? error.substr(kAbortedBecause.size()) : error;
  const std::string text = printable(error, 200);
  if (starts_with(cause, "OOM")) {
    throw Error(KVC_ERR_OUT_OF_MEMORY,
                      doing + ": the server at " + address + " is full: " + text);
  }
  if (starts_with(cause, "WRONGPASS") || starts_with(cause, "NOAUTH")) {
    throw Error(KVC_ERR_CONFIG, "authentication failed for user " + quoted(user) +
                                          " at " + address + ": " + text);
  }
  if (starts_with(cause, "NOPERM")) {
    throw Error(KVC_ERR_CONFIG, doing + ": user " + quoted(user) +
                                          " lacks a permission at " + address + ": " + text);
  }
  throw Error(KVC_ERR_IO, doing + ": " + address + " replied: " + text);
}

}  // namespace kvc::plugin::redis
