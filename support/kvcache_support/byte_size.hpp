// Byte sizes as the configuration writes them ("2GiB", "512 MiB", "1.5GiB", "1000"): the grammar
// of docs/config.md#byte-sizes, in one place for the core (kvc::parse_byte_size) and the
// plugins, which link no code of the core. Header-only.
#pragma once

#include <algorithm>
#include <charconv>
#include <cstddef>
#include <limits>
#include <stdexcept>
#include <string>
#include <string_view>

namespace kvc::plugin {

namespace byte_size_detail {

static_assert(sizeof(size_t) >= 8, "byte sizes up to TiB need a 64-bit size_t");

struct Unit {
  const char* name;
  size_t multiplier;
};

constexpr Unit kUnits[] = {
    {"B", 1},
    {"KB", 1000},
    {"MB", 1000 * 1000},
    {"GB", 1000 * 1000 * 1000},
    {"KiB", size_t{1} << 10},
    {"MiB", size_t{1} << 20},
    {"GiB", size_t{1} << 30},
    {"TiB", size_t{1} << 40},
};

template <class Quote>
[[noreturn]] void fail(Quote& quote, std::string_view text, const std::string& reason) {
  throw std::invalid_argument("invalid byte size " + quote(text) + ": " + reason);
}

inline std::string unit_names() {
  std::string names;
  for (const Unit& unit : kUnits) {
    names += names.empty() ? "" : ", ";
    names += unit.name;
  }
  return names;
}

inline bool all_digits(std::string_view text) {
  return !text.empty() &&
         std::all_of(text.begin(), text.end(), [](char c) { return c >= '0' && c <= '9'; });
}

// floor(0.<digits> * multiplier), exactly: each step divides by ten what the digits to its
// right contributed, and nested floors of integer divisions equal the floor of the whole.
inline size_t scaled_fraction(std::string_view digits, size_t multiplier) {
  size_t scaled = 0;
  for (auto it = digits.rbegin(); it != digits.rend(); ++it) {
    scaled = (static_cast<size_t>(*it - '0') * multiplier + scaled) / 10;
  }
  return scaled;
}

}  // namespace byte_size_detail

// The bytes `text` stands for; throws std::invalid_argument("invalid byte size <quoted text>:
// <reason>"), where `quote` (std::string(std::string_view)) writes user text in messages.
template <class Quote>
size_t parse_byte_size(std::string_view text, Quote quote) {
  namespace d = byte_size_detail;
  if (text.empty()) d::fail(quote, text, "empty");
  if (text.front() == '-') d::fail(quote, text, "negative");
  // "1.5 GiB" is split into whole "1", fraction "5" and unit "GiB".
  const size_t number_end = std::min(text.find_first_not_of("0123456789."), text.size());
  const std::string_view number = text.substr(0, number_end);
  const size_t point = number.find('.');
  const bool has_point = point != std::string_view::npos;
  const std::string_view whole = number.substr(0, point);
  const std::string_view fraction = has_point ? number.substr(point + 1) : std::string_view{};
  const std::string_view unit =
      text.substr(std::min(text.find_first_not_of(" \t", number_end), text.size()));
  if (!d::all_digits(whole) || (has_point && !d::all_digits(fraction))) {
    d::fail(quote, text,
            "expected a number followed by an optional unit (" + d::unit_names() + ")");
  }
  if (has_point && unit.empty()) {
    d::fail(quote, text, "a number of bytes without a unit must be whole");
  }
  size_t multiplier = unit.empty() ? 1 : 0;
  for (const d::Unit& known : d::kUnits) {
    if (unit == known.name) multiplier = known.multiplier;
  }
  if (multiplier == 0) {
    d::fail(quote, text, "unknown unit " + quote(unit) + ", expected one of " + d::unit_names());
  }
  constexpr size_t kMax = std::numeric_limits<size_t>::max();
  size_t count = 0;
  const auto [end, error] = std::from_chars(whole.data(), whole.data() + whole.size(), count);
  if (error != std::errc{} || count > kMax / multiplier) d::fail(quote, text, "too large");
  const size_t whole_bytes = count * multiplier;
  const size_t fraction_bytes = d::scaled_fraction(fraction, multiplier);
  if (fraction_bytes > kMax - whole_bytes) d::fail(quote, text, "too large");
  return whole_bytes + fraction_bytes;
}

}  // namespace kvc::plugin
