#include "stored_image.hpp"

#include "error.hpp"
#include "quote.hpp"

namespace kvc {

SequenceImage decode_value(const StoredValue& bytes, const Store& store, const std::string& key) {
  try {
    return decode(bytes.data(), bytes.size(), DecodedRows::in_place);
  } catch (const Error& e) {
    const kvc_status_code code = e.code() == KVC_ERR_UNSUPPORTED ? e.code() : KVC_ERR_IO;
    throw Error(code, "store " + quote(store.name()) + ": the value under " + quote(key) + ": " +
                          e.what());
  }
}

}  // namespace kvc
