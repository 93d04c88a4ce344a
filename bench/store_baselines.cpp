#include "store_baselines.hpp"

#include <fcntl.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <sstream>
#include <vector>

#include "common.hpp"
#include "timer.hpp"

extern char** environ;

namespace kvc_bench {

namespace {

[[noreturn]] void fail_errno(const std::string& what) {
  throw Error(what + ": " + std::strerror(errno));
}

// A file descriptor closed when it goes out of scope.
struct Fd {
  int fd = -1;
  explicit Fd(int f) : fd(f) {}
  ~Fd() {
    if (fd >= 0) close(fd);
  }
  Fd(const Fd&) = delete;
  Fd& operator=(const Fd&) = delete;
};

void write_all(int fd, const unsigned char* data, size_t n, const std::string& path) {
  while (n > 0) {
    const ssize_t done = write(fd, data, n);
    if (done < 0 && errno == EINTR) continue;
    if (done <= 0) fail_errno("write " + path);
    data += done;
    n -= static_cast<size_t>(done);
  }
}

void read_all(int fd, unsigned char* data, size_t n, const std::string& path) {
  while (n > 0) {
    const ssize_t done = read(fd, data, n);
    if (done < 0 && errno == EINTR) continue;
    if (done < 0) fail_errno("read " + path);
    if (done == 0) throw Error("read " + path + ": the file is shorter than written");
    data += done;
    n -= static_cast<size_t>(done);
  }
}

// Everything the command writes on stdout (stderr is left to the terminal); throws when it
// cannot be started or does not exit with 0.
std::string run_capturing(const std::vector<std::string>& argv) {
  int pipe_fds[2];
  if (pipe(pipe_fds) != 0) fail_errno("pipe");
  Fd read_end(pipe_fds[0]), write_end(pipe_fds[1]);
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_adddup2(&actions, write_end.fd, STDOUT_FILENO);
  posix_spawn_file_actions_addclose(&actions, read_end.fd);
  std::vector<char*> args;
  for (const std::string& a : argv) args.push_back(const_cast<char*>(a.c_str()));
  args.push_back(nullptr);
  pid_t pid = 0;
  const int spawned = posix_spawnp(&pid, args[0], &actions, nullptr, args.data(), environ);
  posix_spawn_file_actions_destroy(&actions);
  if (spawned != 0) throw Error("cannot run " + argv[0] + ": " + std::strerror(spawned));
  close(write_end.fd);
  write_end.fd = -1;
  std::string out;
  char buffer[4096];
  for (;;) {
    const ssize_t n = read(read_end.fd, buffer, sizeof buffer);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;
    out.append(buffer, static_cast<size_t>(n));
  }
  int status = 0;
  while (waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }
  if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
    throw Error(argv[0] + " failed (exit status " + std::to_string(WEXITSTATUS(status)) +
                "); its output: " + out);
  }
  return out;
}

// The rps column of redis-benchmark's CSV line for `test` ("SET", "GET").
double csv_rate(const std::string& csv, const std::string& test) {
  std::istringstream lines(csv);
  std::string line;
  const std::string prefix = "\"" + test + "\",\"";
  while (std::getline(lines, line)) {
    if (line.compare(0, prefix.size(), prefix) != 0) continue;
    const double rate = std::strtod(line.c_str() + prefix.size(), nullptr);
    if (rate > 0) return rate;
  }
  throw Error("redis-benchmark printed no " + test + " rate; its output: " + csv);
}

}  // namespace

double memcpy_seconds(size_t bytes, int reps) {
  std::vector<unsigned char> src(bytes, 1), dst(bytes, 0);
  std::vector<double> seconds;
  for (int rep = 0; rep < reps; ++rep) {
    Timer t;
    std::memcpy(dst.data(), src.data(), bytes);
    clobber_memory(dst.data());
    seconds.push_back(t.seconds());
  }
  return median(seconds);
}

FileSeconds file_seconds(const std::string& folder, size_t bytes, bool fsync_each, int reps) {
  const std::string path = folder + "/kvc-bench-baseline.bin";
  std::vector<unsigned char> data(bytes, 7), back(bytes);
  std::vector<double> writes, reads;
  for (int rep = 0; rep < reps; ++rep) {
    Timer t;
    {
      Fd fd(open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0600));
      if (fd.fd < 0) fail_errno("open " + path);
      write_all(fd.fd, data.data(), bytes, path);
      if (fsync_each && fsync(fd.fd) != 0) fail_errno("fsync " + path);
    }
    writes.push_back(t.seconds());
    t.restart();
    {
      Fd fd(open(path.c_str(), O_RDONLY));
      if (fd.fd < 0) fail_errno("open " + path);
      read_all(fd.fd, back.data(), bytes, path);
    }
    clobber_memory(back.data());
    reads.push_back(t.seconds());
  }
  unlink(path.c_str());
  return {median(writes), median(reads)};
}

RedisBenchmarkRates redis_benchmark(const std::string& host, int port, size_t bytes,
                                    int requests) {
  const std::string csv =
      run_capturing({"redis-benchmark", "-h", host, "-p", std::to_string(port), "-c", "1", "-n",
                     std::to_string(requests), "-d", std::to_string(bytes), "-t", "set,get",
                     "--csv"});
  return {csv_rate(csv, "SET"), csv_rate(csv, "GET")};
}

}  // namespace kvc_bench
