#include "stored_image.hpp"

#include "quote.hpp"

namespace kvc {

std::string value_name(const Store& store, const std::string& key) {
  return "store " + quote(store.name()) + ": the value under " + quote(key);
}

SequenceImage decode_value(const StoredValue& bytes, const Store& store, const std::string& key) {
  try {
    return decode(bytes.data(), bytes.size(), DecodedRows::in_place);
  } catch (const Error& e) {
    const kvc_status_code code = e.code() == KVC_ERR_UNSUPPORTED ? e.code() : KVC_ERR_IO;
    throw Error(code, value_name(store, key) + ": " + e.what());
  }
}

}  // namespace kvc
