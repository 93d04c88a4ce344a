#include "offload.hpp"

#include "stored_image.hpp"

namespace kvc {

void offload_sequence(Cache& cache, int32_t seq_id, const std::string& store,
                      const std::string& key) {
  const Store& target = cache.context().store(store);
  const support::LargeBytes bytes = cache.export_bytes(seq_id);
  target.put(key, bytes.data(), bytes.size());
  cache.remove_sequence(seq_id);
}

void restore_sequence(Cache& cache, int32_t seq_id, const std::string& store,
                      const std::string& key) {
  const Store& source = cache.context().store(store);
  cache.check_new_sequence_id(seq_id);
  const StoredValue bytes = source.get(key);
  cache.import_sequence(seq_id, decode_value(bytes, source, key));
}

}  // namespace kvc
