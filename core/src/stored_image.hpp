// A store's value as a sequence image: what a restore or prefix load refuses about a value
// read back, each refusal naming the store and the key.
#pragma once

#include <string>

#include "kvcache/kvcache_error.hpp"
#include "sequence_image.hpp"
#include "store.hpp"

namespace kvc {

// "store 'NAME': the value under 'KEY'", the start of every refusal of a value.
std::string value_name(const Store& store, const std::string& key);
// The image in `bytes`, its rows left there: one that does not decode is a damaged value
// (IO); a newer format keeps its UNSUPPORTED.
SequenceImage decode_value(const StoredValue& bytes, const Store& store, const std::string& key);
// Runs `import` (a Cache::import_sequence of the value's image); an image it refuses
// (INVALID_ARGUMENT: another shape; UNSUPPORTED: a statistic missing, a lossy conversion)
// keeps its code, the message naming the store and the key.
template <class Import>
void import_value(const Store& store, const std::string& key, Import&& import) {
  try {
    import();
  } catch (const Error& e) {
    if (e.code() != KVC_ERR_INVALID_ARGUMENT && e.code() != KVC_ERR_UNSUPPORTED) throw;
    throw Error(e.code(), value_name(store, key) + ": " + e.what());
  }
}

}  // namespace kvc
