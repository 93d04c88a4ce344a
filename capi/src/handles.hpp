// The C handles and the one place where C++ exceptions become kvc_status objects.
#pragma once

#include <memory>
#include <cstring>
#include <new>
#include <string>

#include "cache.hpp"
#include "context.hpp"
#include "error.hpp"
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

// The integer a C caller stored in an enum field, read without assuming it is a valid
// enumerator (loading an out-of-range value as a C++ enum is undefined).
template <typename Enum>
int32_t raw_enum(const Enum& field) {
  static_assert(sizeof(Enum) == sizeof(int32_t), "C enums are int-sized here");
  int32_t value;
  std::memcpy(&value, &field, sizeof value);
  return value;
}

template <typename Enum>
void require_enum(const Enum& field, int32_t first, int32_t last, const char* message) {
  int32_t value = raw_enum(field);
  require(value >= first && value <= last, message);
}

// Copies a caller's versioned struct over `defaults`: fields the caller does not know keep
// their defaults. Rejects a zero struct_size.
template <typename T>
T read_versioned(const T* in, T defaults, const char* what) {
  require(in != nullptr, what);
  require(in->struct_size != 0, "struct_size is 0: call the *_init function first");
  size_t n = in->struct_size < sizeof(T) ? in->struct_size : sizeof(T);
  std::memcpy(&defaults, in, n);
  defaults.struct_size = sizeof(T);
  return defaults;
}

// Writes `value` into a caller's versioned struct, no further than its struct_size.
template <typename T>
void write_versioned(T* out, const T& value) {
  require(out != nullptr, "output struct is NULL");
  require(out->struct_size != 0, "output struct_size is 0: set it to sizeof the struct");
  uint32_t caller_size = out->struct_size;
  size_t n = caller_size < sizeof(T) ? caller_size : sizeof(T);
  std::memcpy(out, &value, n);
  out->struct_size = caller_size;
}

}  // namespace kvc
