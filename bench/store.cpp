// kvc-bench store: offload and restore throughput of one sequence through each store (host,
// disk, and redis when --redis is given) for export images of 1, 4, 16 and 64 MiB, each beside
// a baseline measured in the same run on a value of the same size (store_baselines.hpp).
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "common.hpp"
#include "machine.hpp"
#include "report.hpp"
#include "store_baselines.hpp"
#include "subcommands.hpp"
#include "timer.hpp"

namespace kvc_bench {

const char* const kStoreHelp =
    "  --dir=DIR          folder of the disk store (default: a new temporary folder, removed\n"
    "                     afterwards)\n"
    "  --redis=HOST:PORT  also measure a redis store on this server, beside redis-benchmark\n"
    "                     (from PATH) against the same server\n"
    "  --redis-wait=N     the redis store's wait_replicas: each put waits for N replicas of\n"
    "                     the server (default 0: none)\n"
    "  --sizes=LIST       export image sizes in MiB, comma-separated (default 1,4,16,64)\n"
    "  --reps=N           repetitions of each measurement; medians count (default 5)\n"
    "  --fsync=0|1        the disk store and its baseline fsync each write (default 1)\n"
    "\n"
    "The sequence has 8 layers, 8 KV heads of dimension 128, f16, and as many tokens as make\n"
    "its export image the size asked for (within one token, 32 KiB). Offload is\n"
    "kvc_seq_offload() (export, put, remove), restore kvc_seq_restore() (get, import); GB/s\n"
    "are 10^9 image bytes per second of the median call. <store>_export_gbps and _import_gbps\n"
    "time kvc_seq_export() and kvc_seq_import() alone, in the same repetitions, the part of\n"
    "each call that is no store's; <store>_offload_export_share and _restore_import_share are\n"
    "their seconds over the offload's and the restore's (the rest is the store's put or get,\n"
    "the removal and the buffers).\n"
    "Baselines, same size, same run: memcpy (host), writing a file in the disk store's folder\n"
    "(with fsync as --fsync) and reading it back (disk), and redis-benchmark -c 1 -d SIZE\n"
    "-t set,get (redis; its requests per second times SIZE). The last line,\n"
    "store_redis_vs_redis_benchmark, is at the largest size: (1 / SET rate + 1 / GET rate) /\n"
    "(median offload seconds + median restore seconds), i.e. our put+get throughput (one\n"
    "offload and one restore) over redis-benchmark's (one SET and one GET) for a value of the\n"
    "same size; printed only with --redis.\n";

namespace {

constexpr int32_t kLayers = 8, kKvHeads = 8, kHeadDim = 128;
constexpr size_t kMiB = size_t{1} << 20;

std::string yaml_quoted(const std::string& text) {
  std::string out = "\"";
  for (const char c : text) {
    if (c == '"' || c == '\\') out += '\\';
    out += c;
  }
  return out + "\"";
}

std::vector<size_t> parse_sizes(const std::string& list) {
  std::vector<size_t> sizes;
  std::istringstream in(list);
  std::string item;
  while (std::getline(in, item, ',')) {
    char* end = nullptr;
    const long mib = std::strtol(item.c_str(), &end, 10);
    if (item.empty() || *end != '\0' || mib < 1 || mib > 4096)
      throw UsageError("--sizes: expected MiB counts in 1..4096 separated by commas, got '" +
                       list + "'");
    sizes.push_back(static_cast<size_t>(mib) * kMiB);
  }
  if (sizes.empty()) throw UsageError("--sizes: no size given");
  return sizes;
}

struct RedisServer {
  std::string host;
  int port = 0;
};

RedisServer parse_redis(const std::string& text) {
  const size_t colon = text.rfind(':');
  char* end = nullptr;
  const long port = colon == std::string::npos ? 0 : std::strtol(text.c_str() + colon + 1, &end, 10);
  if (colon == std::string::npos || colon == 0 || *end != '\0' || port < 1 || port > 65535)
    throw UsageError("--redis: expected HOST:PORT, got '" + text + "'");
  return {text.substr(0, colon), static_cast<int>(port)};
}

// The disk store's folder: --dir, or a new temporary folder removed on destruction.
class Folder {
 public:
  explicit Folder(const std::string& given) {
    if (!given.empty()) {
      std::filesystem::create_directories(given);
      path_ = given;
      return;
    }
    std::string pattern =
        (std::filesystem::temp_directory_path() / "kvc-bench-store-XXXXXX").string();
    if (mkdtemp(pattern.data()) == nullptr) throw Error("mkdtemp " + pattern + " failed");
    path_ = pattern;
    owned_ = true;
  }
  ~Folder() {
    std::error_code ignored;
    if (owned_) std::filesystem::remove_all(path_, ignored);
  }
  Folder(const Folder&) = delete;
  Folder& operator=(const Folder&) = delete;
  const std::string& path() const { return path_; }

 private:
  std::string path_;
  bool owned_ = false;
};

// A context with the stores and a cache of the benchmark's shape; sequence 0 is the one
// offloaded and restored.
class StoreBench {
 public:
  StoreBench(const std::string& yaml, size_t largest_image) {
    check(kvc_context_create(yaml.c_str(), &context_), "kvc_context_create");
    kvc_cache_params p;
    kvc_cache_params_init(&p);
    p.layers = kLayers;
    p.kv_heads = kKvHeads;
    p.q_heads = kKvHeads;
    p.head_dim = kHeadDim;
    p.dtype = KVC_DTYPE_F16;
    // The sequence, an imported copy of it, partly filled blocks and positions.
    p.memory_limit = 3 * largest_image + 64 * kMiB;
    if (kvc_status* s = kvc_cache_create(context_, &p, &cache_)) {
      kvc_context_destroy(context_);
      check(s, "kvc_cache_create");
    }
  }
  ~StoreBench() {
    kvc_cache_destroy(cache_);
    kvc_context_destroy(context_);
  }
  StoreBench(const StoreBench&) = delete;
  StoreBench& operator=(const StoreBench&) = delete;

  kvc_context* context() const { return context_; }
  kvc_cache* cache() const { return cache_; }

  // Sequence 0 afresh with `tokens` tokens of random K/V on every layer.
  void fill(int32_t tokens) {
    if (kvc_status* removed = kvc_seq_remove(cache_, 0)) {
      if (kvc_status_get_code(removed) != KVC_ERR_NOT_FOUND) check(removed, "kvc_seq_remove");
      kvc_status_free(removed);  // none yet
    }
    check(kvc_seq_create(cache_, 0), "kvc_seq_create");
    const int32_t chunk = 256;
    const size_t row = static_cast<size_t>(kKvHeads) * kHeadDim;
    std::mt19937 rng(static_cast<uint32_t>(tokens));
    std::uniform_real_distribution<float> u(-1.0f, 1.0f);
    std::vector<float> k(static_cast<size_t>(chunk) * row), v(k.size());
    std::vector<int32_t> positions(static_cast<size_t>(chunk));
    for (int32_t start = 0; start < tokens; start += chunk) {
      int32_t n = std::min(chunk, tokens - start), seq = 0;
      for (int32_t i = 0; i < n; ++i) positions[static_cast<size_t>(i)] = start + i;
      kvc_batch batch;
      kvc_batch_init(&batch, 1, &seq, &n, positions.data());
      for (int32_t layer = 0; layer < kLayers; ++layer) {
        for (float& x : k) x = u(rng);
        for (float& x : v) x = u(rng);
        const kvc_tensor tk{k.data(), KVC_DTYPE_F32, KVC_DEVICE_HOST, 0};
        const kvc_tensor tv{v.data(), KVC_DTYPE_F32, KVC_DEVICE_HOST, 0};
        check(kvc_append(cache_, layer, &batch, &tk, &tv), "kvc_append");
      }
    }
  }

  std::vector<unsigned char> image() const {
    size_t size = 0, written = 0;
    check(kvc_seq_export_size(cache_, 0, &size), "kvc_seq_export_size");
    std::vector<unsigned char> bytes(size);
    check(kvc_seq_export(cache_, 0, bytes.data(), bytes.size(), &written), "kvc_seq_export");
    bytes.resize(written);
    return bytes;
  }

  // Tokens whose export image is closest to `bytes`: the image grows linearly with tokens.
  int32_t tokens_for(size_t bytes) {
    const int32_t a = 16, b = 48;
    fill(a);
    const double size_a = static_cast<double>(image().size());
    fill(b);
    const double per_token = (static_cast<double>(image().size()) - size_a) / (b - a);
    const double fixed = size_a - a * per_token;
    const double tokens = (static_cast<double>(bytes) - fixed) / per_token;
    return std::max(1, static_cast<int32_t>(tokens + 0.5));
  }

 private:
  kvc_context* context_ = nullptr;
  kvc_cache* cache_ = nullptr;
};

struct StoreSeconds {
  double offload = 0;
  double restore = 0;
  double export_call = 0;  // kvc_seq_export() alone, into a buffer already touched
  double import_call = 0;  // kvc_seq_import() alone, of the exported bytes
};

// Medians of offloading and restoring sequence 0 through `store` (which then holds it again)
// and, in the same repetitions, so under the same conditions, of exporting and importing it
// alone. Checks that the restored sequence exports to `image`; drops the key.
StoreSeconds measure_store(StoreBench& bench, const std::string& store, size_t size,
                           const std::vector<unsigned char>& image, int reps) {
  const std::string key = "kvc-bench-store/" + std::to_string(getpid()) + "/" +
                          std::to_string(size);
  std::vector<unsigned char> buffer(image.size());
  std::vector<double> offloads, restores, exports, imports;
  for (int rep = 0; rep < reps; ++rep) {
    size_t written = 0;
    Timer t;
    check(kvc_seq_export(bench.cache(), 0, buffer.data(), buffer.size(), &written),
          "kvc_seq_export");
    exports.push_back(t.seconds());
    // Imported in the state a restore meets: the sequence removed, its memory free.
    check(kvc_seq_remove(bench.cache(), 0), "kvc_seq_remove");
    t.restart();
    check(kvc_seq_import(bench.cache(), 0, buffer.data(), written), "kvc_seq_import");
    imports.push_back(t.seconds());
    t.restart();
    check(kvc_seq_offload(bench.cache(), 0, store.c_str(), key.c_str()), "kvc_seq_offload");
    offloads.push_back(t.seconds());
    t.restart();
    check(kvc_seq_restore(bench.cache(), 0, store.c_str(), key.c_str()), "kvc_seq_restore");
    restores.push_back(t.seconds());
  }
  check(kvc_store_drop(bench.context(), store.c_str(), key.c_str()), "kvc_store_drop");
  if (bench.image() != image)
    throw Error("store " + store + ": the restored sequence differs from the offloaded one");
  return {median(offloads), median(restores), median(exports), median(imports)};
}

double gbps(size_t bytes, double seconds) { return static_cast<double>(bytes) / seconds / 1e9; }

}  // namespace

int run_store(Options& opts) {
  const std::string dir = opts.get_string("dir", "");
  const std::string redis_text = opts.get_string("redis", "");
  const std::vector<size_t> sizes = parse_sizes(opts.get_string("sizes", "1,4,16,64"));
  const int reps = static_cast<int>(opts.get_int("reps", 5, 1, 1000));
  const int64_t redis_wait = opts.get_int("redis-wait", 0, 0, 64);
  const bool fsync_each = opts.get_int("fsync", 1, 0, 1) != 0;
  opts.reject_unknown();
  const bool with_redis = !redis_text.empty();
  const RedisServer redis = with_redis ? parse_redis(redis_text) : RedisServer{};
  report_machine();

  const Folder folder(dir);
  const size_t largest = *std::max_element(sizes.begin(), sizes.end());
  std::string yaml = "stores:\n";
  yaml += "  host: { plugin: host, params: { capacity: " + std::to_string(2 * largest + 64 * kMiB) +
          " } }\n";
  yaml += "  disk: { plugin: disk, params: { path: " + yaml_quoted(folder.path()) +
          ", fsync: " + (fsync_each ? "true" : "false") + " } }\n";
  if (with_redis) {
    yaml += "  redis: { plugin: redis, params: { host: " + yaml_quoted(redis.host) +
            ", port: " + std::to_string(redis.port) +
            ", wait_replicas: " + std::to_string(redis_wait) + " } }\n";
  }
  StoreBench bench(yaml, largest);
  std::vector<std::string> stores = {"host", "disk"};
  if (with_redis) stores.push_back("redis");

  report("layers", kLayers);
  report("kv_heads", kKvHeads);
  report("head_dim", kHeadDim);
  report("dtype", "f16");
  report("reps", reps);
  report("disk_dir", folder.path());
  report("disk_fsync", fsync_each ? 1 : 0);
  if (with_redis) report("redis", redis_text);
  if (with_redis) report("redis_wait_replicas", redis_wait);

  double redis_ratio_at_largest = 0;
  for (const size_t size : sizes) {
    const std::string at = "_" + std::to_string(size / kMiB) + "MiB";
    const int32_t tokens = bench.tokens_for(size);
    bench.fill(tokens);
    const std::vector<unsigned char> image = bench.image();
    const size_t bytes = image.size();
    report("tokens" + at, tokens);
    report("image_bytes" + at, bytes);

    for (const std::string& store : stores) {
      const StoreSeconds s = measure_store(bench, store, size, image, reps);
      const std::string name = "store_" + store;
      report(name + "_offload_gbps" + at, gbps(bytes, s.offload));
      report(name + "_restore_gbps" + at, gbps(bytes, s.restore));
      report(name + "_export_gbps" + at, gbps(bytes, s.export_call));
      report(name + "_import_gbps" + at, gbps(bytes, s.import_call));
      report(name + "_offload_export_share" + at, s.export_call / s.offload);
      report(name + "_restore_import_share" + at, s.import_call / s.restore);
      if (store == "host") {
        const double copy = memcpy_seconds(bytes, reps);
        report("memcpy_gbps" + at, gbps(bytes, copy));
        report(name + "_offload_vs_memcpy" + at, copy / s.offload);
        report(name + "_restore_vs_memcpy" + at, copy / s.restore);
      } else if (store == "disk") {
        const FileSeconds file = file_seconds(folder.path(), bytes, fsync_each, reps);
        report("disk_file_write_gbps" + at, gbps(bytes, file.write));
        report("disk_file_read_gbps" + at, gbps(bytes, file.read));
        report(name + "_offload_vs_file_write" + at, file.write / s.offload);
        report(name + "_restore_vs_file_read" + at, file.read / s.restore);
      } else {
        const int requests =
            static_cast<int>(std::clamp<size_t>(512 * kMiB / bytes, 2 * static_cast<size_t>(reps),
                                                10000));
        const RedisBenchmarkRates rb = redis_benchmark(redis.host, redis.port, bytes, requests);
        report("redis_benchmark_requests" + at, requests);
        report("redis_benchmark_set_gbps" + at, rb.set_per_s * static_cast<double>(bytes) / 1e9);
        report("redis_benchmark_get_gbps" + at, rb.get_per_s * static_cast<double>(bytes) / 1e9);
        report(name + "_offload_vs_set" + at, 1.0 / rb.set_per_s / s.offload);
        report(name + "_restore_vs_get" + at, 1.0 / rb.get_per_s / s.restore);
        const double ratio =
            (1.0 / rb.set_per_s + 1.0 / rb.get_per_s) / (s.offload + s.restore);
        report(name + "_vs_redis_benchmark" + at, ratio);
        if (size == largest) redis_ratio_at_largest = ratio;
      }
    }
  }
  if (with_redis) report("store_redis_vs_redis_benchmark", redis_ratio_at_largest);
  return 0;
}

}  // namespace kvc_bench
