// The one exception type of the core; the C layer turns it into a kvc_status.
#pragma once

#include <stdexcept>
#include <string>

#include "kvcache/kvcache.h"

namespace kvc {

class Error : public std::runtime_error {
 public:
  Error(kvc_status_code code, const std::string& message)
      : std::runtime_error(message), code_(code) {}
  kvc_status_code code() const noexcept { return code_; }

 private:
  kvc_status_code code_;
};

}  // namespace kvc
