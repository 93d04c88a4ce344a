// The replies to a pipeline of GETs read from the socket without hiredis, so that a value's
// parts go from the kernel straight into the caller's memory: no reader buffer, no reply
// object, no copy. Used only when hiredis holds no unread bytes (Connection::reader_drained)
// and no reply but the GETs' is due; every byte it reads belongs to those replies.
#pragma once

#include <cstddef>
#include <string>
#include <vector>

#include "connection.hpp"

namespace kvc::plugin::redis {

class RawReader {
 public:
  explicit RawReader(Connection& connection);

  struct Reply {
    enum Kind { kBulk, kNil, kError, kOther } kind = kOther;
    size_t size = 0;   // kBulk: the string's length
    std::string text;  // kError, kOther: the reply's line
  };
  // The next reply. A bulk string of exactly `expected` bytes is written to `destination`; one
  // of another length is read and dropped (its length returned). Throws IO and breaks the
  // connection when the connection fails.
  Reply next(char* destination, size_t expected);

 private:
  // Reads what the socket has (at least one byte) after the unread bytes.
  void fill();
  // The next line, without its CRLF.
  std::string line();
  // `size` bytes into `destination` (nullptr: dropped), then the CRLF after them.
  void payload(char* destination, size_t size);

  Connection& connection_;
  std::vector<char> buffer_;
  size_t begin_ = 0, end_ = 0;  // unread bytes of buffer_
};

}  // namespace kvc::plugin::redis
