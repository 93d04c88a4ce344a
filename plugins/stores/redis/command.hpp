// Redis commands written in RESP by the plugin itself, straight from the caller's memory:
// small arguments are copied into one framing buffer, large ones (a value's parts) are sent
// from where they lie (sendmsg with an iovec per run), so a put copies no value byte.
#pragma once

#include <sys/uio.h>

#include <cstddef>
#include <string>
#include <string_view>
#include <vector>

namespace kvc::plugin::redis {

// Commands queued for one write; the arguments' memory must outlive write_to().
class CommandBatch {
 public:
  void add(std::initializer_list<std::string_view> args);
  void add(const std::vector<std::string_view>& args);
  bool empty() const { return runs_.empty(); }

  // Writes every queued command to the socket `fd`, blocking (the socket's send timeout
  // applies); returns 0, or the errno of the failed write (EAGAIN: the timeout expired).
  int write_to(int fd);

 private:
  // A run of bytes: in framing_ (offset) or the caller's memory (data).
  struct Run {
    const char* data;  // nullptr: framing_[offset, offset + size)
    size_t offset;
    size_t size;
  };
  void argument_count(size_t count);
  void argument(std::string_view arg);
  void framed(std::string_view bytes);

  std::string framing_;
  std::vector<Run> runs_;
};

}  // namespace kvc::plugin::redis
