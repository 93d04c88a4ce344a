// User text (YAML keys and values, names, paths) as it appears in messages: every byte that is
// not part of valid UTF-8, and every control character, written as \xNN, and text longer than
// kQuotedBytes cut at a character boundary with "..." and its full length stated.
#pragma once

#include <cstddef>
#include <string>
#include <string_view>

namespace kvc {

constexpr size_t kQuotedBytes = 200;

// The text made printable and bounded, without quotes: for a key path in a message.
std::string printable(std::string_view text, size_t max_bytes = kQuotedBytes);
// 'text' made printable and bounded: "'abc'", "'aaaa...' (10485760 bytes)".
std::string quote(std::string_view text);

}  // namespace kvc
