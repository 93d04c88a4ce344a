// The C handles and the one place where C++ exceptions become kvc_status objects.
#pragma once

#include <memory>
#include <cstring>
#include <new>
#include <string>

#include "cache.hpp"
#include "context.hpp"
#include "enums.hpp"
#include "kvcache/kvcache_error.hpp"
#include "kvcache/kvcache.h"

struct kvc_status {
  kvc_status_code code;
  std::string message;
};

struct kvc_context {
  std::unique_ptr<kvc::Context> impl;
};

struct kvc_cache {
  std::unique_ptr<kvc::Cache> impl;
};

namespace kvc {

kvc_status* make_status(kvc_status_code code, const std::string& message) noexcept;

// Runs `body`; returns NULL on success or a status for whatever it threw.
template <typename Body>
kvc_status* guarded(Body&& body) noexcept {
  try {
    body();
    return nullptr;
  } catch (const Error& e) {
    return make_status(e.code(), e.what());
  } catch (const std::bad_alloc&) {
    return make_status(KVC_ERR_OUT_OF_MEMORY, "host memory exhausted");
  } catch (const std::exception& e) {
    return make_status(KVC_ERR_INTERNAL, std::string("internal error: ") + e.what());
  } catch (...) {
    return make_status(KVC_ERR_INTERNAL, "internal error: unknown exception");
  }
}

inline void require(bool condition, const char* message) {
  if (!condition) throw Error(KVC_ERR_INVALID_ARGUMENT, message);
}

template <typename Enum>
void require_enum(const Enum& field, int32_t first, int32_t last, const char* message) {
  require(enum_in(field, first, last), message);
}

// Copies a caller's versioned struct `name` over `defaults`: fields the caller does not know
// keep their defaults. Rejects NULL and a zero struct_size; a larger struct (a caller built
// against a newer kvcache) only when it sets bytes beyond the fields this library knows.
template <typename T>
T read_versioned(const T* in, T defaults, const std::string& name) {
  if (!in) throw Error(KVC_ERR_INVALID_ARGUMENT, name + " is NULL");
  if (in->struct_size == 0) {
    throw Error(KVC_ERR_INVALID_ARGUMENT,
                name + "->struct_size is 0: call the *_init function first");
  }
  const auto* bytes = reinterpret_cast<const unsigned char*>(in);
  for (size_t i = sizeof(T); i < in->struct_size; ++i) {
    if (bytes[i] != 0) {
      throw Error(KVC_ERR_UNSUPPORTED,
                  name + "->struct_size is " + std::to_string(in->struct_size) +
                      " and sets bytes beyond the " + std::to_string(sizeof(T)) +
                      " this kvcache knows: the caller needs a newer kvcache");
    }
  }
  size_t n = in->struct_size < sizeof(T) ? in->struct_size : sizeof(T);
  std::memcpy(&defaults, in, n);
  defaults.struct_size = sizeof(T);
  return defaults;
}

// Writes `value` into a caller's versioned struct `name`, no further than its struct_size.
template <typename T>
void write_versioned(T* out, const T& value, const std::string& name) {
  if (!out) throw Error(KVC_ERR_INVALID_ARGUMENT, name + " is NULL");
  if (out->struct_size == 0) {
    throw Error(KVC_ERR_INVALID_ARGUMENT,
                name + "->struct_size is 0: set it to sizeof the struct");
  }
  uint32_t caller_size = out->struct_size;
  size_t n = caller_size < sizeof(T) ? caller_size : sizeof(T);
  std::memcpy(out, &value, n);
  out->struct_size = caller_size;
}

}  // namespace kvc
