// Enum values written by C code (a caller, a plugin) may be any int. Loading one that no
// enumerator has as the C++ enum is undefined (UBSan's enum check), so every boundary reads
// the integer first, with these, and lets only enumerators through.
#pragma once

#include <cstdint>
#include <cstring>

namespace kvc {

template <typename Enum>
int32_t raw_enum(const Enum& field) {
  static_assert(sizeof(Enum) == sizeof(int32_t), "C enums are int-sized here");
  int32_t value;
  std::memcpy(&value, &field, sizeof value);
  return value;
}

template <typename Enum>
bool enum_in(const Enum& field, int32_t first, int32_t last) {
  const int32_t value = raw_enum(field);
  return value >= first && value <= last;
}

}  // namespace kvc
