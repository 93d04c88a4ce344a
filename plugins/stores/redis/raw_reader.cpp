#include "raw_reader.hpp"

#include <sys/socket.h>

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <cstring>

namespace kvc::plugin::redis {
namespace {

constexpr size_t kBufferBytes = 64 * 1024;
// A bulk string's length line, or any other reply's, is far shorter.
constexpr size_t kMaxLineBytes = 64 * 1024;

}  // namespace

RawReader::RawReader(Connection& connection) : connection_(connection), buffer_(kBufferBytes) {}

void RawReader::fill() {
  if (begin_ == end_) {
    begin_ = end_ = 0;
  } else if (end_ == buffer_.size()) {
    std::memmove(buffer_.data(), buffer_.data() + begin_, end_ - begin_);
    end_ -= begin_;
    begin_ = 0;
  }
  while (true) {
    const ssize_t got = recv(connection_.fd(), buffer_.data() + end_, buffer_.size() - end_, 0);
    if (got > 0) {
      end_ += static_cast<size_t>(got);
      return;
    }
    if (got < 0 && errno == EINTR) continue;
    connection_.fail_receive(got == 0 ? 0 : errno);
  }
}

std::string RawReader::line() {
  size_t scanned = begin_;
  while (true) {
    const char* start = buffer_.data() + scanned;
    const void* cr = std::memchr(start, '\r', end_ - scanned);
    if (cr != nullptr) {
      const size_t at = static_cast<size_t>(static_cast<const char*>(cr) - buffer_.data());
      if (at + 1 < end_) {
        if (buffer_[at + 1] != '\n') connection_.fail_io("protocol error: CR without LF");
        std::string text(buffer_.data() + begin_, at - begin_);
        begin_ = at + 2;
        return text;
      }
      scanned = at;  // the LF is still to come
    } else {
      scanned = end_;
    }
    if (end_ - begin_ >= kMaxLineBytes) {
      connection_.fail_io("protocol error: a reply line too long");
    }
    const size_t offset = scanned - begin_;
    fill();
    scanned = begin_ + offset;
  }
}

void RawReader::payload(char* destination, size_t size) {
  size_t done = std::min(size, end_ - begin_);
  if (destination != nullptr) std::memcpy(destination, buffer_.data() + begin_, done);
  begin_ += done;
  while (done < size) {
    if (destination == nullptr) {
      fill();
      const size_t take = std::min(size - done, end_ - begin_);
      begin_ += take;
      done += take;
      continue;
    }
    // Straight from the socket into the destination.
    const ssize_t got = recv(connection_.fd(), destination + done, size - done, 0);
    if (got > 0) {
      done += static_cast<size_t>(got);
    } else if (got < 0 && errno == EINTR) {
      continue;
    } else {
      connection_.fail_receive(got == 0 ? 0 : errno);
    }
  }
  while (end_ - begin_ < 2) fill();
  if (buffer_[begin_] != '\r' || buffer_[begin_ + 1] != '\n') {
    connection_.fail_io("protocol error: a bulk string without its CRLF");
  }
  begin_ += 2;
}

RawReader::Reply RawReader::next(char* destination, size_t expected) {
  Reply reply;
  std::string text = line();
  if (text.empty()) connection_.fail_io("protocol error: an empty reply line");
  if (text[0] != '$') {
    reply.kind = text[0] == '-' ? Reply::kError : Reply::kOther;
    reply.text = text.substr(1);
    return reply;
  }
  char* end = nullptr;
  const long long length = std::strtoll(text.c_str() + 1, &end, 10);
  if (*end != '\0' || length < -1) connection_.fail_io("protocol error: a bad bulk length");
  if (length == -1) {
    reply.kind = Reply::kNil;
    return reply;
  }
  reply.kind = Reply::kBulk;
  reply.size = static_cast<size_t>(length);
  payload(reply.size == expected ? destination : nullptr, reply.size);
  return reply;
}

}  // namespace kvc::plugin::redis
