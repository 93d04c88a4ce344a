#include "quote.hpp"

#include <cstdio>

namespace kvc {
namespace {

bool continuation(unsigned char c) { return (c & 0xC0u) == 0x80u; }

// The length of the valid UTF-8 character at text[i], or 0 when the bytes there are not one
// (overlong forms, surrogates and code points above U+10FFFF included).
size_t utf8_length(std::string_view text, size_t i) {
  const auto at = [&](size_t k) { return static_cast<unsigned char>(text[i + k]); };
  const unsigned char lead = at(0);
  if (lead < 0x80u) return 1;
  size_t n = 0;
  unsigned char low = 0x80u, high = 0xBFu;  // the range of the second byte
  if (lead >= 0xC2u && lead <= 0xDFu) {
    n = 2;
  } else if (lead >= 0xE0u && lead <= 0xEFu) {
    n = 3;
    if (lead == 0xE0u) low = 0xA0u;
    if (lead == 0xEDu) high = 0x9Fu;
  } else if (lead >= 0xF0u && lead <= 0xF4u) {
    n = 4;
    if (lead == 0xF0u) low = 0x90u;
    if (lead == 0xF4u) high = 0x8Fu;
  } else {
    return 0;
  }
  if (i + n > text.size() || at(1) < low || at(1) > high) return 0;
  for (size_t k = 2; k < n; ++k) {
    if (!continuation(at(k))) return 0;
  }
  return n;
}

void append_escaped(std::string& out, unsigned char byte) {
  char hex[8];
  std::snprintf(hex, sizeof hex, "\\x%02X", byte);
  out += hex;
}

// The printable form of the longest prefix of whole characters within max_bytes; `used` is
// the prefix's length in bytes.
std::string escaped_prefix(std::string_view text, size_t max_bytes, size_t& used) {
  std::string out;
  used = 0;
  while (used < text.size()) {
    const size_t n = utf8_length(text, used);
    if (used + (n == 0 ? 1 : n) > max_bytes) break;
    const auto byte = static_cast<unsigned char>(text[used]);
    if (n == 0 || (n == 1 && (byte < 0x20u || byte == 0x7Fu))) {
      append_escaped(out, byte);
      ++used;
    } else {
      out.append(text.substr(used, n));
      used += n;
    }
  }
  return out;
}

std::string length_note(std::string_view text) {
  return " (" + std::to_string(text.size()) + " bytes)";
}

}  // namespace

std::string printable(std::string_view text, size_t max_bytes) {
  size_t used = 0;
  std::string out = escaped_prefix(text, max_bytes, used);
  return used < text.size() ? out + "..." + length_note(text) : out;
}

std::string quote(std::string_view text) {
  size_t used = 0;
  const std::string out = escaped_prefix(text, kQuotedBytes, used);
  return used < text.size() ? "'" + out + "...'" + length_note(text) : "'" + out + "'";
}

}  // namespace kvc
