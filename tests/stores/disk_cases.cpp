// The disk store's own cases (test suite "disk"): values that outlive an instance, files
// damaged by hand, leftovers of interrupted writes, failed writes, several instances on one
// folder, and the parameters.
#include <doctest/doctest.h>
#include <fcntl.h>
#include <sys/file.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <csignal>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

#include "store_cases.hpp"

namespace kvc::store_tests {
namespace {

namespace fs = std::filesystem;

// The files of a folder whose names do not start with '.' (values, not writes in progress).
std::vector<fs::path> value_files(const std::string& folder) {
  std::vector<fs::path> files;
  for (const auto& entry : fs::directory_iterator(folder)) {
    if (entry.path().filename().string().front() != '.') files.push_back(entry.path());
  }
  return files;
}

// The one value file of a folder.
fs::path only_value_file(const std::string& folder) {
  const std::vector<fs::path> files = value_files(folder);
  REQUIRE(files.size() == 1);
  return files.front();
}

std::vector<char> read_file(const fs::path& file) {
  std::ifstream in(file, std::ios::binary);
  return std::vector<char>(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
}

void write_file(const fs::path& file, const std::vector<char>& bytes) {
  std::ofstream out(file, std::ios::binary | std::ios::trunc);
  out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
  REQUIRE(out.good());
}

bool contains(const std::string& text, const std::string& part) {
  return text.find(part) != std::string::npos;
}

TEST_SUITE("disk") {
  TEST_CASE("values outlive the instance that put them") {
    const std::string folder = environment().temp_folder();
    const std::string key = environment().key("persistent");
    {
      StoreUnderTest first(Params{{"path", folder}});
      REQUIRE(first.ok());
      REQUIRE(first.Store::put(key, random_bytes(5000, 1)).code == KVC_OK);
    }
    StoreUnderTest second(Params{{"path", folder}});
    REQUIRE(second.ok());
    CHECK(second.get(key).value == random_bytes(5000, 1));
  }

  TEST_CASE("a damaged file is IO naming the file and what is wrong") {
    const std::string folder = environment().temp_folder();
    StoreUnderTest store(Params{{"path", folder}});
    REQUIRE(store.ok());
    const std::string key = environment().key("damaged");
    REQUIRE(store.put(key, random_bytes(4096, 1)).code == KVC_OK);
    const fs::path file = only_value_file(folder);
    const std::vector<char> original = read_file(file);

    SUBCASE("a flipped byte of the value") {
      std::vector<char> flipped = original;
      flipped[flipped.size() - 100] ^= 0x10;
      write_file(file, flipped);
      const GetResult got = store.get(key);
      CHECK(got.outcome.code == KVC_ERR_IO);
      CHECK(contains(got.outcome.message, file.string() + ": checksum mismatch"));
    }
    SUBCASE("a truncated file") {
      fs::resize_file(file, original.size() - 10);
      const GetResult got = store.get(key);
      CHECK(got.outcome.code == KVC_ERR_IO);
      CHECK(contains(got.outcome.message,
                     file.string() + ": truncated: " + std::to_string(original.size() - 10) +
                         " of " + std::to_string(original.size()) + " bytes"));
    }
    SUBCASE("a file cut inside its header") {
      fs::resize_file(file, 5);
      const GetResult got = store.get(key);
      CHECK(got.outcome.code == KVC_ERR_IO);
      CHECK(contains(got.outcome.message, file.string() + ": truncated: 5 of "));
    }
    SUBCASE("a file that is no store's") {
      std::vector<char> other = original;
      other[0] = 'X';
      write_file(file, other);
      const GetResult got = store.get(key);
      CHECK(got.outcome.code == KVC_ERR_IO);
      CHECK(contains(got.outcome.message, file.string() + ": not a store file"));
    }
    SUBCASE("the file of another key in its place") {
      const std::string other_folder = environment().temp_folder();
      StoreUnderTest other(Params{{"path", other_folder}});
      REQUIRE(other.put(environment().key("other"), random_bytes(4096, 1)).code == KVC_OK);
      write_file(file, read_file(only_value_file(other_folder)));
      const GetResult got = store.get(key);
      CHECK(got.outcome.code == KVC_ERR_IO);
      CHECK(contains(got.outcome.message, file.string() + ": holds the value of another key"));
    }
    CHECK(store.put(key, random_bytes(10, 2)).code == KVC_OK);
    CHECK(store.get(key).value == random_bytes(10, 2));
  }

  TEST_CASE("leftovers of interrupted writes are ignored") {
    const std::string folder = environment().temp_folder();
    const std::string leftover = folder + "/.tmp-" + std::to_string(getpid()) + "-0";
    write_file(leftover, {'h', 'a', 'l', 'f'});
    write_file(folder + "/.tmp-1-7", {});
    StoreUnderTest store(Params{{"path", folder}});
    REQUIRE(store.ok());
    for (int i = 0; i < 5; ++i) {
      const std::string key = environment().key("after-leftover-" + std::to_string(i));
      REQUIRE(store.put(key, random_bytes(100, i)).code == KVC_OK);
      CHECK(store.get(key).value == random_bytes(100, i));
    }
    CHECK(read_file(leftover) == std::vector<char>{'h', 'a', 'l', 'f'});
    CHECK(value_files(folder).size() == 5);
  }

  TEST_CASE("an old, unlocked leftover of a crashed write goes when a store opens the folder") {
    const std::string folder = environment().temp_folder();
    const auto an_hour_ago = fs::file_time_type::clock::now() - std::chrono::hours(1);
    const fs::path stale = folder + "/.tmp-1-1", fresh = folder + "/.tmp-1-2",
                   being_written = folder + "/.tmp-1-3", other = folder + "/.other-1-4";
    for (const fs::path& file : {stale, fresh, being_written, other}) write_file(file, {'h'});
    for (const fs::path& file : {stale, being_written, other})
      fs::last_write_time(file, an_hour_ago);
    // A writer's lock, as a put holds it: on its own open file, so the store's attempt fails.
    const int writer = ::open(being_written.c_str(), O_RDONLY | O_CLOEXEC);
    REQUIRE(writer >= 0);
    REQUIRE(::flock(writer, LOCK_EX) == 0);
    StoreUnderTest store(Params{{"path", folder}});
    REQUIRE(store.ok());
    CHECK_FALSE(fs::exists(stale));
    CHECK(fs::exists(fresh));
    CHECK(fs::exists(being_written));
    CHECK(fs::exists(other));
    ::close(writer);
  }

  TEST_CASE("a put whose write fails is IO, and leaves the old value and no temporary file") {
    const std::string folder = environment().temp_folder();
    const std::string key = environment().key("failed-write");
    StoreUnderTest store(Params{{"path", folder}});
    REQUIRE(store.ok());
    REQUIRE(store.put(key, random_bytes(1000, 1)).code == KVC_OK);
    // A child whose files may not pass 64 KiB: its writes past that fail (EFBIG) as they would
    // on a full device (ENOSPC, reported as KVC_ERR_OUT_OF_MEMORY), on the same path.
    const pid_t child = fork();
    REQUIRE(child >= 0);
    if (child == 0) {
      std::signal(SIGXFSZ, SIG_IGN);
      const rlimit limit{64 << 10, 64 << 10};
      bool ok = ::setrlimit(RLIMIT_FSIZE, &limit) == 0;
      {
        Store writer(environment().plugin(), Params{{"path", folder}});
        const Outcome put = writer.put(key, random_bytes(1 << 20, 2));
        ok = ok && writer.ok() && put.code == KVC_ERR_IO &&
             contains(put.message, "cannot write " + folder + "/.tmp-") &&
             writer.get(key).value == random_bytes(1000, 1);
      }
      _exit(ok ? 0 : 1);
    }
    int status = 0;
    REQUIRE(waitpid(child, &status, 0) == child);
    CHECK(WIFEXITED(status));
    CHECK(WEXITSTATUS(status) == 0);
    CHECK(store.get(key).value == random_bytes(1000, 1));
    size_t all = 0;
    for (const auto& entry : fs::directory_iterator(folder)) all += entry.is_regular_file();
    CHECK(all == 1);
  }

  TEST_CASE("a put leaves one file per key and no temporary file") {
    const std::string folder = environment().temp_folder();
    StoreUnderTest store(Params{{"path", folder}, {"fsync", "false"}});
    REQUIRE(store.ok());
    for (int round = 0; round < 3; ++round) {
      for (int i = 0; i < 4; ++i) {
        REQUIRE(store.put(environment().key(std::to_string(i)), random_bytes(64, round)).code ==
                KVC_OK);
      }
    }
    CHECK(value_files(folder).size() == 4);
    size_t all = 0;
    for (const auto& entry : fs::directory_iterator(folder)) all += entry.is_regular_file();
    CHECK(all == 4);
    REQUIRE(store.remove(environment().key("0")).code == KVC_OK);
    CHECK(value_files(folder).size() == 3);
  }

  TEST_CASE("two instances on one folder see each other's puts and removes") {
    const std::string folder = environment().temp_folder();
    StoreUnderTest a(Params{{"path", folder}}), b(Params{{"path", folder}});
    REQUIRE(a.ok());
    REQUIRE(b.ok());
    const std::string key = environment().key("shared");
    REQUIRE(a.put(key, random_bytes(300, 1)).code == KVC_OK);
    CHECK(b.get(key).value == random_bytes(300, 1));
    REQUIRE(b.put(key, random_bytes(200, 2)).code == KVC_OK);
    CHECK(a.get(key).value == random_bytes(200, 2));
    REQUIRE(a.remove(key).code == KVC_OK);
    bool found = true;
    REQUIRE(b.exists(key, found).code == KVC_OK);
    CHECK_FALSE(found);
    CHECK(b.remove(key).code == KVC_ERR_NOT_FOUND);
  }

  TEST_CASE("a file is named by the key's percent-encoding, or by a hash past 200 bytes") {
    const std::string folder = environment().temp_folder();
    StoreUnderTest store(Params{{"path", folder}});
    REQUIRE(store.ok());
    const std::string prefix = environment().key("");  // "kvc-test-<pid>-<hex>/"
    const std::string encoded_prefix = prefix.substr(0, prefix.size() - 1) + "%2F";
    REQUIRE(store.put(prefix + "a b/\xC3\xA9.~_-Z9", random_bytes(1, 1)).code == KVC_OK);
    CHECK(only_value_file(folder).filename() ==
          "v-" + encoded_prefix + "a%20b%2F%C3%A9.%7E_-Z9");
    REQUIRE(store.remove(prefix + "a b/\xC3\xA9.~_-Z9").code == KVC_OK);

    const std::string longest_plain = prefix + std::string(200 - encoded_prefix.size(), 'p');
    REQUIRE(store.put(longest_plain, random_bytes(1, 2)).code == KVC_OK);
    CHECK(only_value_file(folder).filename() ==
          "v-" + encoded_prefix + std::string(200 - encoded_prefix.size(), 'p'));
    REQUIRE(store.remove(longest_plain).code == KVC_OK);

    REQUIRE(store.put(longest_plain + "p", random_bytes(1, 3)).code == KVC_OK);
    const std::string hashed = only_value_file(folder).filename().string();
    CHECK(hashed.size() == 2 + 32);
    CHECK(hashed.compare(0, 2, "h-") == 0);
    CHECK(hashed.find_first_not_of("0123456789abcdef", 2) == std::string::npos);
    CHECK(store.get(longest_plain + "p").value == random_bytes(1, 3));
  }

  TEST_CASE("another process replacing a value never lets a get see a part of one") {
    const std::string folder = environment().temp_folder();
    const std::string key = environment().key("across-processes");
    constexpr uint32_t kRounds = 200;
    StoreUnderTest reader(Params{{"path", folder}, {"fsync", "false"}});
    REQUIRE(reader.ok());
    REQUIRE(reader.put(key, signed_value(0, 0)).code == KVC_OK);
    const pid_t writer = fork();
    REQUIRE(writer >= 0);
    if (writer == 0) {
      int failed = 0;
      {
        Store store(environment().plugin(), Params{{"path", folder}, {"fsync", "false"}});
        for (uint32_t round = 1; round <= kRounds && store.ok(); ++round) {
          failed += store.put(key, signed_value(1, round)).code != KVC_OK;
        }
        failed += !store.ok();
      }
      _exit(failed == 0 ? 0 : 1);
    }
    int torn = 0, failed_gets = 0, status = 0;
    while (waitpid(writer, &status, WNOHANG) == 0) {
      const GetResult got = reader.get(key);
      uint32_t who = 0;
      if (got.outcome.code != KVC_OK) {
        ++failed_gets;
      } else if (!is_whole_signed_value(got.value, &who)) {
        ++torn;
      }
    }
    CHECK(WIFEXITED(status));
    CHECK(WEXITSTATUS(status) == 0);
    CHECK(failed_gets == 0);
    CHECK(torn == 0);
    uint32_t last = 0;
    REQUIRE(is_whole_signed_value(reader.get(key).value, &last));
    CHECK(reader.get(key).value == signed_value(1, kRounds));
  }

  TEST_CASE("path is created with its parents; what is not a folder is CONFIG") {
    const std::string base = environment().temp_folder();
    const std::string nested = base + "/one/two/three";
    StoreUnderTest created(Params{{"path", nested}});
    INFO(created.creation().message);
    REQUIRE(created.ok());
    CHECK(fs::is_directory(nested));

    write_file(base + "/file", {'x'});
    StoreUnderTest on_file(Params{{"path", base + "/file"}});
    CHECK(on_file.creation().code == KVC_ERR_CONFIG);
    CHECK(contains(on_file.creation().message, "params.path: '" + base + "/file' exists and is not a folder"));
    StoreUnderTest below_file(Params{{"path", base + "/file/below"}});
    CHECK(below_file.creation().code == KVC_ERR_CONFIG);

    StoreUnderTest missing(Params{{"fsync", "true"}});
    CHECK(missing.creation().code == KVC_ERR_CONFIG);
    CHECK(missing.creation().message == "disk store: params.path: missing, the disk store needs a folder");
  }

  TEST_CASE("fsync is true or false") {
    const std::string folder = environment().temp_folder();
    for (const char* accepted : {"true", "false"}) {
      CAPTURE(accepted);
      StoreUnderTest store(Params{{"path", folder}, {"fsync", accepted}});
      CHECK(store.ok());
    }
    StoreUnderTest yes(Params{{"path", folder}, {"fsync", "yes"}});
    CHECK(yes.creation().code == KVC_ERR_CONFIG);
    CHECK(yes.creation().message == "disk store: params.fsync: expected true or false, got 'yes'");
    StoreUnderTest twice(Params{{"path", folder}, {"path", folder}});
    CHECK(twice.creation().message == "disk store: params.path: given twice");
  }
}

}  // namespace
}  // namespace kvc::store_tests
