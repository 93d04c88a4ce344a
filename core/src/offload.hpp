// Offload and restore of one sequence through a store (kvc_seq_offload, kvc_seq_restore,
// docs/stores.md): the value is the sequence's export image.
#pragma once

#include <cstdint>
#include <string>

#include "cache.hpp"

namespace kvc {

// Puts sequence `seq_id`'s image under `key` in the store named `store`, then removes the
// sequence; any error leaves the sequence as it was.
void offload_sequence(Cache& cache, int32_t seq_id, const std::string& store,
                      const std::string& key);
// Creates sequence `seq_id` from the value under `key`, all or nothing; the id is checked
// before the store is asked.
void restore_sequence(Cache& cache, int32_t seq_id, const std::string& store,
                      const std::string& key);

}  // namespace kvc
