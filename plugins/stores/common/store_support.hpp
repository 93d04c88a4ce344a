// What the in-tree store plugins share: reading their parameters, checking the arguments of
// kvc_store_vtable's calls, turning a C++ store class into the vtable and the entry point, and
// checksumming values. Header-only (a plugin links no code of the core); link the CMake target
// kvc_store_support, which brings libxxhash.
//
// A store class S provides:
//   static constexpr const char* kName;           // the descriptor's name ("disk")
//   static constexpr const char* kLabel;          // the prefix of its messages ("disk store")
//   static constexpr const char* kParams[];       // every parameter it accepts
//   S(const StoreParams& params, const kvc_host_api* host);
//   void put(const std::string& key, const void* data, size_t size);
//   void get(const std::string& key, ValueBuffer& buffer);   // buffer.reserve(size) once
//   bool exists(const std::string& key);
//   void remove(const std::string& key);          // NOT_FOUND when there is no value
// all callable from several threads at once. They report errors by throwing Error
// (fail()); std::bad_alloc becomes KVC_ERR_OUT_OF_MEMORY and anything else KVC_ERR_INTERNAL.
// Keys reach them checked: non-NULL and at most kMaxKeyBytes bytes.
//
// KVC_STORE_PLUGIN(S) defines the library's exported kvc_plugin_entry (one descriptor) and
// plugin_label().
#pragma once

#include <xxhash.h>

#include <cerrno>
#include <cinttypes>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <optional>
#include <stdexcept>
#include <string>
#include <string_view>
#include <type_traits>
#include <utility>
#include <vector>

#include "kvcache/kvcache_plugin.h"
#include "kvcache_support/byte_size.hpp"
#include "kvcache/kvcache_plugin_support.hpp"

namespace kvc::plugin {

// The longest key the ABI allows (kvc_store_vtable).
constexpr size_t kMaxKeyBytes = 1024;

// Text from outside (keys, parameter values) as it appears in messages: control bytes as
// \xNN, and more than max_bytes cut at a UTF-8 character boundary with "...".
inline std::string printable(std::string_view text, size_t max_bytes = 80) {
  std::string out;
  size_t end = text.size();
  if (end > max_bytes) {
    end = max_bytes;
    while (end > 0 && (static_cast<unsigned char>(text[end]) & 0xC0u) == 0x80u) --end;
  }
  for (size_t i = 0; i < end; ++i) {
    const auto byte = static_cast<unsigned char>(text[i]);
    if (byte < 0x20u || byte == 0x7Fu) {
      char hex[8];
      std::snprintf(hex, sizeof hex, "\\x%02X", byte);
      out += hex;
    } else {
      out += text[i];
    }
  }
  if (end < text.size()) out += "...";
  return out;
}

// 'text', printable and bounded.
inline std::string quoted(std::string_view text) { return "'" + printable(text) + "'"; }

// A number in a message (std::to_string would export a GNU-unique symbol, see fail()).
inline std::string decimal(uint64_t value) {
  char text[24];
  std::snprintf(text, sizeof text, "%" PRIu64, value);
  return text;
}

// The checksum stores keep beside a value to detect one that changed or is incomplete.
inline uint64_t value_checksum(const void* data, size_t size) noexcept {
  return XXH3_64bits(data, size);
}

// ------------------------------------------------------------------------- parameters

// A store's `params` (key -> text as written in YAML). Unknown and duplicate keys are refused
// when it is built; every problem is a KVC_ERR_CONFIG Error naming the key, e.g.
//   disk store: params.fsync: expected true or false, got 'yes'
//   host store: params.colour: unknown parameter, expected one of capacity
class StoreParams {
 public:
  template <size_t N>
  StoreParams(const kvc_store_param* params, size_t n_params, const char* const (&allowed)[N])
      : StoreParams(params, n_params, allowed, N) {}

  StoreParams(const kvc_store_param* params, size_t n_params, const char* const* allowed,
              size_t n_allowed) {
    if (n_params > 0 && params == nullptr) {
      fail(KVC_ERR_INVALID_ARGUMENT, "params is NULL but n_params is %zu", n_params);
    }
    for (size_t i = 0; i < n_params; ++i) {
      if (params[i].key == nullptr) fail(KVC_ERR_INVALID_ARGUMENT, "parameter %zu has no key", i);
      const std::string key = params[i].key;
      if (!is_allowed(key, allowed, n_allowed)) {
        std::string list;
        for (size_t a = 0; a < n_allowed; ++a) {
          list += (a == 0 ? "" : ", ");
          list += allowed[a];
        }
        config_error(key, n_allowed == 0 ? "unknown parameter, this store takes none"
                                         : "unknown parameter, expected one of " + list);
      }
      if (find(key) != nullptr) config_error(key, "given twice");
      entries_.emplace_back(key, params[i].value != nullptr ? params[i].value : "");
    }
  }

  // The value as written, or nullptr when the key is absent.
  const std::string* find(std::string_view key) const {
    for (const auto& entry : entries_) {
      if (entry.first == key) return &entry.second;
    }
    return nullptr;
  }

  std::string text(std::string_view key, std::string fallback) const {
    const std::string* value = find(key);
    return value != nullptr ? *value : std::move(fallback);
  }

  // A non-empty value that must be given; `needed_for` ends the message when it is absent
  // ("a folder": "params.path: missing, the disk store needs a folder").
  std::string required_text(std::string_view key, std::string_view needed_for) const {
    const std::string* value = find(key);
    if (value == nullptr) {
      config_error(key, "missing, the " + std::string(plugin_label()) + " needs " +
                            std::string(needed_for));
    }
    if (value->empty()) expected(key, "a non-empty value", *value);
    return *value;
  }

  // Decimal digits with an optional '+', in [min, max].
  uint64_t integer(std::string_view key, uint64_t fallback, uint64_t min, uint64_t max) const {
    const std::string* value = find(key);
    if (value == nullptr) return fallback;
    const std::optional<uint64_t> parsed = parse_unsigned(*value);
    if (!parsed || *parsed < min || *parsed > max) {
      char what[96];
      if (max == UINT64_MAX) {
        std::snprintf(what, sizeof what, "an integer >= %" PRIu64, min);
      } else {
        std::snprintf(what, sizeof what, "an integer in %" PRIu64 "..%" PRIu64, min, max);
      }
      expected(key, what, *value);
    }
    return *parsed;
  }

  // A byte size (docs/config.md#byte-sizes) in [min, max].
  size_t byte_size(std::string_view key, size_t fallback, size_t min = 0,
                   size_t max = SIZE_MAX) const {
    const std::string* value = find(key);
    if (value == nullptr) return fallback;
    size_t bytes = 0;
    try {
      bytes = parse_byte_size(*value, quoted);
    } catch (const std::invalid_argument& e) {
      config_error(key, e.what());
    }
    if (bytes < min || bytes > max) {
      char what[96];
      std::snprintf(what, sizeof what, "a byte size in %zu..%zu bytes", min, max);
      expected(key, what, *value);
    }
    return bytes;
  }

  bool boolean(std::string_view key, bool fallback) const {
    const std::string* value = find(key);
    if (value == nullptr) return fallback;
    if (*value == "true") return true;
    if (*value == "false") return false;
    expected(key, "true or false", *value);
  }

  [[noreturn]] static void config_error(std::string_view key, const std::string& problem) {
    throw Error(KVC_ERR_CONFIG, "params." + printable(key) + ": " + problem);
  }

 private:
  static bool is_allowed(const std::string& key, const char* const* allowed, size_t n_allowed) {
    for (size_t a = 0; a < n_allowed; ++a) {
      if (key == allowed[a]) return true;
    }
    return false;
  }

  [[noreturn]] static void expected(std::string_view key, const std::string& what,
                                    const std::string& got) {
    config_error(key, "expected " + what + ", got " + quoted(got));
  }

  static std::optional<uint64_t> parse_unsigned(const std::string& text) {
    const size_t first = (!text.empty() && text[0] == '+') ? 1 : 0;
    if (first == text.size()) return std::nullopt;
    for (size_t i = first; i < text.size(); ++i) {
      if (text[i] < '0' || text[i] > '9') return std::nullopt;
    }
    errno = 0;
    const unsigned long long value = std::strtoull(text.c_str() + first, nullptr, 10);
    if (errno == ERANGE) return std::nullopt;
    return static_cast<uint64_t>(value);
  }

  std::vector<std::pair<std::string, std::string>> entries_;  // in order; few
};

// ------------------------------------------------------------------------------ get

// Where get() puts a value: memory from the caller's reserve callback, asked for once.
class ValueBuffer {
 public:
  ValueBuffer(kvc_store_reserve_fn reserve, void* user_data)
      : reserve_(reserve), data_(user_data) {}

  // `size` bytes to write the value into; KVC_ERR_OUT_OF_MEMORY when the callback has none.
  // For an empty value the result may be NULL.
  void* reserve(size_t size) {
    if (reserved_) fail(KVC_ERR_INTERNAL, "a value's memory was reserved twice");
    reserved_ = true;
    void* memory = reserve_(data_, size);
    if (memory == nullptr && size > 0) {
      fail(KVC_ERR_OUT_OF_MEMORY,
           "no memory for a value of %zu bytes (the reserve callback gave NULL)", size);
    }
    return memory;
  }

 private:
  kvc_store_reserve_fn reserve_;
  void* data_;
  bool reserved_ = false;
};

// ------------------------------------------------------------------------ the vtable

inline std::string checked_key(const char* key) {
  if (key == nullptr) fail(KVC_ERR_INVALID_ARGUMENT, "key is NULL");
  const size_t length = strnlen(key, kMaxKeyBytes + 1);
  if (length > kMaxKeyBytes) {
    fail(KVC_ERR_INVALID_ARGUMENT, "key is longer than %zu bytes", kMaxKeyBytes);
  }
  return std::string(key, length);
}

template <class S>
struct StoreAdapter {
  static S& store(void* instance) {
    if (instance == nullptr) fail(KVC_ERR_INVALID_ARGUMENT, "instance is NULL");
    return *static_cast<S*>(instance);
  }

  static int32_t create(const kvc_host_api* host, const kvc_store_param* params, size_t n_params,
                        void** out_instance, kvc_plugin_error* error) noexcept {
    return report_errors(error, [&] {
      if (out_instance == nullptr) fail(KVC_ERR_INVALID_ARGUMENT, "out_instance is NULL");
      *out_instance = nullptr;
      const StoreParams reader(params, n_params, S::kParams);
      *out_instance = std::make_unique<S>(reader, host).release();
    });
  }

  static void destroy(void* instance) noexcept { delete static_cast<S*>(instance); }

  static int32_t put(void* instance, const char* key, const void* data, size_t size,
                     kvc_plugin_error* error) noexcept {
    return report_errors(error, [&] {
      S& s = store(instance);
      const std::string checked = checked_key(key);
      if (data == nullptr && size > 0) {
        fail(KVC_ERR_INVALID_ARGUMENT, "data is NULL but size is %zu", size);
      }
      s.put(checked, data, size);
    });
  }

  static int32_t get(void* instance, const char* key, kvc_store_reserve_fn reserve,
                     void* reserve_data, kvc_plugin_error* error) noexcept {
    return report_errors(error, [&] {
      S& s = store(instance);
      const std::string checked = checked_key(key);
      if (reserve == nullptr) fail(KVC_ERR_INVALID_ARGUMENT, "reserve is NULL");
      ValueBuffer buffer(reserve, reserve_data);
      s.get(checked, buffer);
    });
  }

  static int32_t exists(void* instance, const char* key, int32_t* out_exists,
                        kvc_plugin_error* error) noexcept {
    return report_errors(error, [&] {
      S& s = store(instance);
      const std::string checked = checked_key(key);
      if (out_exists == nullptr) fail(KVC_ERR_INVALID_ARGUMENT, "out_exists is NULL");
      *out_exists = s.exists(checked) ? 1 : 0;
    });
  }

  static int32_t remove(void* instance, const char* key, kvc_plugin_error* error) noexcept {
    return report_errors(error, [&] {
      S& s = store(instance);
      s.remove(checked_key(key));
    });
  }

  static constexpr kvc_store_vtable vtable = {
      sizeof(kvc_store_vtable), &create, &destroy, &put, &get, &exists, &remove,
  };

  static constexpr kvc_plugin_descriptor descriptor = {
      sizeof(kvc_plugin_descriptor), KVC_PLUGIN_ABI_VERSION, KVC_PLUGIN_STORE, S::kName,
      1u, &vtable,
  };
};

inline int32_t store_plugin_entry(const kvc_plugin_descriptor* descriptor,
                                  const kvc_plugin_descriptor** out_descriptors,
                                  size_t* out_count, kvc_plugin_error* error) noexcept {
  if (out_descriptors == nullptr || out_count == nullptr) {
    write_labelled_error(error, "kvc_plugin_entry needs its out-parameters");
    return KVC_ERR_INVALID_ARGUMENT;
  }
  *out_descriptors = descriptor;
  *out_count = 1;
  return KVC_OK;
}

}  // namespace kvc::plugin

// Defines the exported entry point of a library holding the one store Class, and the label
// of its messages.
#define KVC_STORE_PLUGIN(Class)                                                              \
  const char* kvc::plugin::plugin_label() { return Class::kLabel; }                          \
  extern "C" KVC_PLUGIN_EXPORT int32_t kvc_plugin_entry(                                     \
      const kvc_host_api* /*host*/, const kvc_plugin_descriptor** out_descriptors,           \
      size_t* out_count, kvc_plugin_error* error) {                                          \
    return ::kvc::plugin::store_plugin_entry(&::kvc::plugin::StoreAdapter<Class>::descriptor, \
                                             out_descriptors, out_count, error);             \
  }                                                                                          \
  static_assert(std::is_same_v<decltype(&kvc_plugin_entry), kvc_plugin_entry_fn>,            \
                "kvc_plugin_entry must match kvc_plugin_entry_fn")
