#include "files.hpp"

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "kvcache/kvcache_error.hpp"
#include "quote.hpp"

namespace kvc {
namespace {

Error io_error(const std::string& what, const std::string& path, const std::string& problem) {
  return Error(KVC_ERR_IO, what + " " + quote(path) + " " + problem);
}

Error folder_error(const std::string& what, const std::string& path) {
  return io_error(what, path, "is a folder, not a file");
}

}  // namespace

void require_file(const std::string& path, const std::string& what) {
  std::error_code ec;
  const std::filesystem::file_status status = std::filesystem::status(path, ec);
  if (status.type() == std::filesystem::file_type::not_found) {
    throw Error(KVC_ERR_NOT_FOUND, what + " " + quote(path) + " does not exist");
  }
  if (ec) throw io_error(what, path, "cannot be read: " + ec.message());
  if (std::filesystem::is_directory(status)) throw folder_error(what, path);
}

std::string read_file(const std::string& path, const std::string& what) {
  require_file(path, what);
  std::ifstream in(path, std::ios::binary);
  if (!in) throw io_error(what, path, std::string("cannot be opened: ") + std::strerror(errno));
  std::ostringstream bytes;
  bytes << in.rdbuf();
  if (in.bad()) throw io_error(what, path, "cannot be read");
  return bytes.str();
}

void require_not_folder(const std::string& path, const std::string& what) {
  std::error_code ec;
  if (std::filesystem::is_directory(path, ec)) throw folder_error(what, path);
}

}  // namespace kvc
