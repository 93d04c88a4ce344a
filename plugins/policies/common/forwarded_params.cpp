#include "forwarded_params.hpp"

#include <algorithm>
#include <cstring>

namespace kvc::policies {

ForwardedParams::ForwardedParams(const std::vector<std::pair<std::string, std::string>>& entries,
                                 std::initializer_list<const char*> own_keys) {
  for (const auto& entry : entries) {
    bool own = std::any_of(own_keys.begin(), own_keys.end(),
                           [&](const char* key) { return entry.first == key; });
    if (!own) entries_.push_back(entry);
  }
  for (const auto& entry : entries_) params_.push_back({entry.first.c_str(), entry.second.c_str()});
}

}  // namespace kvc::policies
