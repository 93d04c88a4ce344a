// KVL_REQUIRE_OK(call): the kvcache call must return NULL (success); otherwise the test
// stops with the status's code and message. The status is freed once, before doctest sees
// the message (doctest may evaluate a message expression more than once).
#pragma once

#include <string>

#include <doctest/doctest.h>

#include "kvcache/kvcache.h"

inline std::string take_status_text(kvc_status* s) {
  if (s == nullptr) return {};
  std::string text =
      std::string(kvc_status_code_name(kvc_status_get_code(s))) + ": " + kvc_status_message(s);
  kvc_status_free(s);
  return text;
}

#define KVL_REQUIRE_OK(call)                               \
  do {                                                     \
    const std::string kvl_error_ = take_status_text(call); \
    REQUIRE_MESSAGE(kvl_error_.empty(), kvl_error_);       \
  } while (0)
