// A prompt prefix's K/V saved to and loaded from a store in chunks (kvc_prefix_save,
// kvc_prefix_load, docs/stores.md "Prefix keys"): chunk keys from prefix_keys, chunk images
// from prefix_chunks.
#pragma once

#include <cstdint>
#include <string>

#include "cache.hpp"

namespace kvc {

// Writes the whole chunks of sequence `seq_id`'s first n_tokens tokens that the store lacks;
// returns the tokens they cover.
int32_t save_prefix(Cache& cache, int32_t seq_id, const std::string& store,
                    const PrefixRequest& prefix);
// Creates sequence `seq_id` from chunks 0, 1, ... up to the first one missing (an empty
// sequence when chunk 0 is), all or nothing; returns the tokens restored.
int32_t load_prefix(Cache& cache, int32_t seq_id, const std::string& store,
                    const PrefixRequest& prefix);

}  // namespace kvc
