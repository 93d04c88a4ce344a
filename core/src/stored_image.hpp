// A store's value as a sequence image: what a restore or prefix load refuses about a value
// read back, each refusal naming the store and the key.
#pragma once

#include <string>

#include "sequence_image.hpp"
#include "store.hpp"

namespace kvc {

// The image in `bytes`, its rows left there: one that does not decode is a damaged value
// (IO); a newer format keeps its UNSUPPORTED.
SequenceImage decode_value(const StoredValue& bytes, const Store& store, const std::string& key);

}  // namespace kvc
