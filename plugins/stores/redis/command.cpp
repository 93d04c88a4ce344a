#include "command.hpp"

#include <sys/socket.h>

#include <algorithm>
#include <cerrno>
#include <climits>
#include <cstdio>

namespace kvc::plugin::redis {
namespace {

// Arguments at least this long are sent from the caller's memory rather than copied.
constexpr size_t kInlineLimit = 16 * 1024;

}  // namespace

void CommandBatch::add(std::initializer_list<std::string_view> args) {
  argument_count(args.size());
  for (std::string_view arg : args) argument(arg);
}

void CommandBatch::add(const std::vector<std::string_view>& args) {
  argument_count(args.size());
  for (std::string_view arg : args) argument(arg);
}

void CommandBatch::argument_count(size_t count) {
  char header[32];
  const int n = std::snprintf(header, sizeof header, "*%zu\r\n", count);
  framed(std::string_view(header, static_cast<size_t>(n)));
}

void CommandBatch::argument(std::string_view arg) {
  char header[32];
  const int n = std::snprintf(header, sizeof header, "$%zu\r\n", arg.size());
  framed(std::string_view(header, static_cast<size_t>(n)));
  if (arg.size() < kInlineLimit) {
    framed(arg);
  } else {
    runs_.push_back(Run{arg.data(), 0, arg.size()});
  }
  framed("\r\n");
}

void CommandBatch::framed(std::string_view bytes) {
  if (!runs_.empty() && runs_.back().data == nullptr) {
    runs_.back().size += bytes.size();
  } else {
    runs_.push_back(Run{nullptr, framing_.size(), bytes.size()});
  }
  framing_.append(bytes.data(), bytes.size());
}

int CommandBatch::write_to(int fd) {
  std::vector<iovec> iov;
  iov.reserve(runs_.size());
  for (const Run& run : runs_) {
    const char* base = run.data != nullptr ? run.data : framing_.data() + run.offset;
    iov.push_back(iovec{const_cast<char*>(base), run.size});
  }
  size_t first = 0;
  while (first < iov.size()) {
    msghdr message{};
    message.msg_iov = iov.data() + first;
    message.msg_iovlen = std::min<size_t>(iov.size() - first, IOV_MAX);
    // MSG_NOSIGNAL: a peer that went away is EPIPE here, never a SIGPIPE in the host process.
    const ssize_t sent = sendmsg(fd, &message, MSG_NOSIGNAL);
    if (sent < 0) {
      if (errno == EINTR) continue;
      return errno;
    }
    auto left = static_cast<size_t>(sent);
    while (first < iov.size() && left >= iov[first].iov_len) left -= iov[first++].iov_len;
    if (left > 0) {
      iov[first].iov_base = static_cast<char*>(iov[first].iov_base) + left;
      iov[first].iov_len -= left;
    }
  }
  runs_.clear();
  framing_.clear();
  return 0;
}

}  // namespace kvc::plugin::redis
