// The `disk` store: one file per key in a folder (file_names.hpp, file_format.hpp). A put
// writes a temporary file and renames it over the key's file, so a reader (of this or another
// process) finds the old value or the new, whole; with `fsync`, the file is synced before the
// rename and the folder after it, so a confirmed put survives a crash. A get checks the file
// against its header and its checksum. A writer holds a lock on its temporary file; one that
// is old and unlocked was left by a crash, and the next instance that opens the folder removes it.
#include <dirent.h>
#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <sys/uio.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <ctime>
#include <initializer_list>
#include <string>
#include <utility>

#include "file_format.hpp"
#include "file_names.hpp"
#include "common/store_support.hpp"

namespace kvc::plugin {
namespace {

[[noreturn]] void io_error(int error_number, const std::string& what) {
  const kvc_status_code code =
      (error_number == ENOSPC || error_number == EDQUOT) ? KVC_ERR_OUT_OF_MEMORY : KVC_ERR_IO;
  throw Error(code, what + ": " + std::strerror(error_number));
}

// Closes a file descriptor when it goes out of scope.
class Fd {
 public:
  explicit Fd(int fd) : fd_(fd) {}
  Fd(const Fd&) = delete;
  Fd& operator=(const Fd&) = delete;
  ~Fd() {
    if (fd_ >= 0) ::close(fd_);
  }
  int get() const { return fd_; }
  // Closes now, reporting what close reports (a write may fail only there).
  int close() {
    const int result = ::close(fd_);
    fd_ = -1;
    return result;
  }

 private:
  int fd_;
};

void sync_folder_of(const std::string& path) {
  const size_t slash = path.find_last_of('/');
  const std::string parent =
      slash == std::string::npos ? "." : slash == 0 ? "/" : path.substr(0, slash);
  Fd folder(::open(parent.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC));
  if (folder.get() < 0 || ::fsync(folder.get()) != 0) {
    io_error(errno, "cannot sync the folder " + quoted(parent));
  }
}

// Creates `path` and its missing parents as folders (with `sync`, each new one's entry in its
// parent is synced too); a part that exists and is not a folder is a configuration error.
void make_folders(const std::string& path, bool sync) {
  for (size_t end = path.find('/', 1);; end = path.find('/', end + 1)) {
    const std::string part = path.substr(0, end);
    const bool created = ::mkdir(part.c_str(), 0777) == 0;
    if (!created && errno != EEXIST) io_error(errno, "cannot create the folder " + quoted(part));
    struct stat info {};
    if (::stat(part.c_str(), &info) != 0) io_error(errno, quoted(part));
    if (!S_ISDIR(info.st_mode)) {
      StoreParams::config_error("path", quoted(part) + " exists and is not a folder");
    }
    if (created && sync) sync_folder_of(part);
    if (end == std::string::npos) return;
  }
}

// Every temporary file this process makes has its own name: ".tmp-<pid>-<n>".
constexpr char kTempPrefix[] = ".tmp-";
std::atomic<uint64_t> temp_counter{0};

// A temporary file unlocked and unwritten for this long was left by a writer that crashed.
// The age covers the moment between a writer's create and its lock, and between its close and
// its rename (a put that loses its file there fails; no value is lost or damaged).
constexpr time_t kStaleTempSeconds = 600;

// Removes the stale temporary files of the folder; best effort: a file that cannot be opened,
// read or locked is left where it is.
void remove_stale_temp_files(int folder_fd) {
  const int listing_fd = ::dup(folder_fd);
  if (listing_fd < 0) return;
  DIR* listing = ::fdopendir(listing_fd);
  if (listing == nullptr) {
    ::close(listing_fd);
    return;
  }
  const time_t now = std::time(nullptr);
  while (const dirent* entry = ::readdir(listing)) {
    if (std::strncmp(entry->d_name, kTempPrefix, sizeof kTempPrefix - 1) != 0) continue;
    Fd file(::openat(folder_fd, entry->d_name, O_RDONLY | O_NOFOLLOW | O_CLOEXEC));
    struct stat info {};
    if (file.get() < 0 || ::fstat(file.get(), &info) != 0 || !S_ISREG(info.st_mode) ||
        now - info.st_mtime < kStaleTempSeconds || ::flock(file.get(), LOCK_EX | LOCK_NB) != 0) {
      continue;
    }
    ::unlinkat(folder_fd, entry->d_name, 0);
  }
  ::closedir(listing);
}

class DiskStore {
 public:
  static constexpr const char* kName = "disk";
  static constexpr const char* kLabel = "disk store";
  static constexpr const char* kParams[] = {"path", "fsync"};

  DiskStore(const StoreParams& params, const kvc_host_api* /*host*/)
      : folder_(params.required_text("path", "a folder")),
        fsync_(params.boolean("fsync", true)),
        folder_fd_(open_folder(folder_, fsync_)) {
    remove_stale_temp_files(folder_fd_.get());
  }

  void put(const std::string& key, const void* data, size_t size) {
    FileHeader header;
    header.key_bytes = static_cast<uint32_t>(key.size());
    header.value_bytes = size;
    header.checksum = value_checksum(data, size);
    unsigned char header_bytes[kHeaderBytes];
    encode_header(header, header_bytes);

    const auto [temp_fd, temp_name] = create_temp_file();
    Fd file(temp_fd);
    try {
      write_all(file.get(), temp_name,
                {{header_bytes, kHeaderBytes},
                 {const_cast<char*>(key.data()), key.size()},
                 {const_cast<void*>(data), size}});
      if (fsync_ && ::fsync(file.get()) != 0) io_error(errno, "cannot sync " + path(temp_name));
      if (file.close() != 0) io_error(errno, "cannot write " + path(temp_name));
      const std::string name = file_name_for_key(key);
      if (::renameat(folder_fd_.get(), temp_name.c_str(), folder_fd_.get(), name.c_str()) != 0) {
        io_error(errno, "cannot rename " + path(temp_name) + " to " + name);
      }
    } catch (...) {
      ::unlinkat(folder_fd_.get(), temp_name.c_str(), 0);
      throw;
    }
    sync_folder();
  }

  void get(const std::string& key, ValueBuffer& buffer) {
    const std::string name = file_name_for_key(key);
    Fd file(::openat(folder_fd_.get(), name.c_str(), O_RDONLY | O_CLOEXEC));
    if (file.get() < 0) {
      if (errno == ENOENT) not_found(key);
      io_error(errno, "cannot open " + path(name));
    }
    struct stat info {};
    if (::fstat(file.get(), &info) != 0) io_error(errno, "cannot read " + path(name));
    const uint64_t file_bytes = static_cast<uint64_t>(info.st_size);

    unsigned char head[kHeaderBytes + kMaxKeyBytes];
    const size_t head_read = read_at(file.get(), name, head, sizeof head, 0);
    if (head_read < kHeaderBytes) truncated(name, file_bytes, kHeaderBytes);
    const FileHeader header = decode_header(head, path(name));
    const uint64_t value_offset = kHeaderBytes + header.key_bytes;
    if (header.value_bytes > UINT64_MAX - value_offset) {
      bad_file(name, "bad header: a value of " + decimal(header.value_bytes) + " bytes");
    }
    const uint64_t expected_bytes = value_offset + header.value_bytes;
    if (file_bytes < expected_bytes) truncated(name, file_bytes, expected_bytes);
    if (file_bytes > expected_bytes) {
      bad_file(name, decimal(file_bytes) + " bytes where its header says " +
                         decimal(expected_bytes));
    }
    if (header.key_bytes != key.size() ||
        std::memcmp(head + kHeaderBytes, key.data(), key.size()) != 0) {
      bad_file(name, "holds the value of another key than " + quoted(key));
    }

    void* value = buffer.reserve(header.value_bytes);
    const size_t value_read =
        read_at(file.get(), name, value, header.value_bytes, static_cast<off_t>(value_offset));
    if (value_read < header.value_bytes) {
      truncated(name, value_offset + value_read, expected_bytes);
    }
    if (value_checksum(value, header.value_bytes) != header.checksum) {
      bad_file(name, "checksum mismatch");
    }
  }

  bool exists(const std::string& key) {
    const std::string name = file_name_for_key(key);
    struct stat info {};
    if (::fstatat(folder_fd_.get(), name.c_str(), &info, 0) == 0) return true;
    if (errno == ENOENT) return false;
    io_error(errno, "cannot read " + path(name));
  }

  void remove(const std::string& key) {
    const std::string name = file_name_for_key(key);
    if (::unlinkat(folder_fd_.get(), name.c_str(), 0) != 0) {
      if (errno == ENOENT) not_found(key);
      io_error(errno, "cannot remove " + path(name));
    }
    sync_folder();
  }

 private:
  static int open_folder(const std::string& folder, bool sync) {
    make_folders(folder, sync);
    const int fd = ::open(folder.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (fd < 0) io_error(errno, "cannot open the folder " + quoted(folder));
    return fd;
  }

  std::string path(const std::string& name) const { return folder_ + "/" + name; }

  [[noreturn]] static void not_found(const std::string& key) {
    throw Error(KVC_ERR_NOT_FOUND, "no value under key " + quoted(key));
  }

  [[noreturn]] void bad_file(const std::string& name, const std::string& problem) const {
    throw Error(KVC_ERR_IO, path(name) + ": " + problem);
  }

  [[noreturn]] void truncated(const std::string& name, uint64_t has, uint64_t needs) const {
    bad_file(name, "truncated: " + decimal(has) + " of " + decimal(needs) + " bytes");
  }

  std::pair<int, std::string> create_temp_file() const {
    char name[64];
    for (;;) {
      std::snprintf(name, sizeof name, "%s%ld-%llu", kTempPrefix, static_cast<long>(::getpid()),
                    static_cast<unsigned long long>(temp_counter.fetch_add(1)));
      const int fd =
          ::openat(folder_fd_.get(), name, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0666);
      if (fd >= 0) {
        // Held until the file is closed: it tells other instances the write is live.
        if (::flock(fd, LOCK_EX) != 0) {
          const int error_number = errno;
          ::close(fd);
          ::unlinkat(folder_fd_.get(), name, 0);
          io_error(error_number, "cannot lock " + path(name));
        }
        return {fd, name};
      }
      // Another process of the same pid (another PID namespace) may share the folder.
      if (errno != EEXIST) io_error(errno, "cannot create " + path(name));
    }
  }

  void write_all(int fd, const std::string& name, std::initializer_list<iovec> parts) const {
    iovec pending[3];
    int count = 0;
    for (const iovec& part : parts) {
      if (part.iov_len > 0) pending[count++] = part;
    }
    iovec* next = pending;
    while (count > 0) {
      const ssize_t written = ::writev(fd, next, count);
      if (written < 0) {
        if (errno == EINTR) continue;
        io_error(errno, "cannot write " + path(name));
      }
      size_t left = static_cast<size_t>(written);
      while (count > 0 && left >= next->iov_len) {
        left -= next->iov_len;
        ++next;
        --count;
      }
      if (count > 0) {
        next->iov_base = static_cast<char*>(next->iov_base) + left;
        next->iov_len -= left;
      }
    }
  }

  // Reads up to `size` bytes at `offset` straight into `out`; fewer only at the end of the file.
  size_t read_at(int fd, const std::string& name, void* out, size_t size, off_t offset) const {
    size_t done = 0;
    while (done < size) {
      const ssize_t got = ::pread(fd, static_cast<char*>(out) + done, size - done,
                                  offset + static_cast<off_t>(done));
      if (got < 0) {
        if (errno == EINTR) continue;
        io_error(errno, "cannot read " + path(name));
      }
      if (got == 0) break;
      done += static_cast<size_t>(got);
    }
    return done;
  }

  void sync_folder() const {
    if (fsync_ && ::fsync(folder_fd_.get()) != 0) {
      io_error(errno, "cannot sync the folder " + quoted(folder_));
    }
  }

  const std::string folder_;
  const bool fsync_;
  Fd folder_fd_;
};

}  // namespace
}  // namespace kvc::plugin

KVC_STORE_PLUGIN(kvc::plugin::DiskStore);
