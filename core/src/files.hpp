// Files a caller names (a configuration, a plugin, a sequence image): what the path must be,
// checked in one place. Errors are kvc::Error naming the path: NOT_FOUND when nothing is
// there, KVC_ERR_IO when it is a folder or cannot be read. `what` starts the message.
#pragma once

#include <string>

namespace kvc {

// Throws unless `path` is an existing file (not a folder).
void require_file(const std::string& path, const std::string& what);
// The whole file's bytes.
std::string read_file(const std::string& path, const std::string& what);
// Throws KVC_ERR_IO when `path` is a folder: for a file about to be written.
void require_not_folder(const std::string& path, const std::string& what);

}  // namespace kvc
