#include "offload.hpp"

#include "stored_image.hpp"

namespace kvc {
namespace {

// A value older than the last one this context offloaded under its key is stale: the store
// lost the newer one (a failover to a replica that had not received it, a restored backup).
void check_current(const SequenceImage& image, const Store& store, const std::string& key) {
  const uint64_t written = store.offload_versions().last_written(key);
  if (image.offload_version >= written) return;
  const std::string found =
      image.offload_version == 0
          ? "has no offload version (an export, or an offload of an older kvcache)"
          : "has offload version " + std::to_string(image.offload_version);
  throw Error(KVC_ERR_IO, value_name(store, key) + " is stale: it " + found +
                              ", older than version " + std::to_string(written) +
                              " this context offloaded under it (the store lost that value, "
                              "e.g. in a failover)");
}

}  // namespace

void offload_sequence(Cache& cache, int32_t seq_id, const std::string& store,
                      const std::string& key) {
  const Store& target = cache.context().store(store);
  const uint64_t version = OffloadVersions::next();
  uint64_t changes = 0;
  const support::LargeBytes bytes = cache.export_bytes(seq_id, version, &changes);
  target.put(key, bytes.data(), bytes.size());
  target.offload_versions().wrote(key, version);
  cache.remove_sequence(seq_id, changes);
}

void restore_sequence(Cache& cache, int32_t seq_id, const std::string& store,
                      const std::string& key) {
  const Store& source = cache.context().store(store);
  cache.check_new_sequence_id(seq_id);
  const StoredValue bytes = source.get(key);
  SequenceImage image = decode_value(bytes, source, key);
  check_current(image, source, key);
  import_value(source, key, [&] { cache.import_sequence(seq_id, std::move(image)); });
}

}  // namespace kvc
