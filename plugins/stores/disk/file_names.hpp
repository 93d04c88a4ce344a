// The name of the file that holds a key's value, inside the store's folder. Never starts with
// '.', which leaves ".tmp-*" to writes in progress.
#pragma once

#include <string>

namespace kvc::plugin {

// Encoded names longer than this are replaced by a hash of the key.
constexpr size_t kMaxEncodedName = 200;

// "v-" + the key percent-encoded (every byte but [A-Za-z0-9._-] as %XX): reversible. A key
// whose encoding is longer than kMaxEncodedName gets "h-" + its XXH3-128 in hex; its file's
// header holds the whole key, which tells a collision from the key's own value.
std::string file_name_for_key(const std::string& key);

}  // namespace kvc::plugin
