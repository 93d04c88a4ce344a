#include "config.hpp"

#include <yaml-cpp/eventhandler.h>
#include <yaml-cpp/parser.h>
#include <yaml-cpp/yaml.h>

#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstdint>
#include <functional>
#include <limits>
#include <map>
#include <optional>
#include <sstream>
#include <stdexcept>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "cache_params.hpp"
#include "kvcache/kvcache_error.hpp"
#include "kvcache/kvcache_format.h"
#include "kvcache_support/byte_size.hpp"
#include "quote.hpp"

namespace kvc {
namespace {

bool is_digit(char c) { return c >= '0' && c <= '9'; }

bool all_digits(std::string_view text) {
  for (char c : text) {
    if (!is_digit(c)) return false;
  }
  return !text.empty();
}

// ------------------------------------------------------------------ YAML reading

// Records where each document starts and builds nothing.
class DocumentStarts : public YAML::EventHandler {
 public:
  const YAML::Mark& last() const { return last_; }

  void OnDocumentStart(const YAML::Mark& mark) override { last_ = mark; }
  void OnDocumentEnd() override {}
  void OnNull(const YAML::Mark&, YAML::anchor_t) override {}
  void OnAlias(const YAML::Mark&, YAML::anchor_t) override {}
  void OnScalar(const YAML::Mark&, const std::string&, YAML::anchor_t,
                const std::string&) override {}
  void OnSequenceStart(const YAML::Mark&, const std::string&, YAML::anchor_t,
                       YAML::EmitterStyle::value) override {}
  void OnSequenceEnd() override {}
  void OnMapStart(const YAML::Mark&, const std::string&, YAML::anchor_t,
                  YAML::EmitterStyle::value) override {}
  void OnMapEnd() override {}

 private:
  YAML::Mark last_;
};

// A value in the document together with where it came from, for error messages.
struct Field {
  std::string path;     // dotted key path; empty for the document itself
  YAML::Mark key_mark;  // where the key is (the document start for the document itself)
  YAML::Node value;
};

struct KeyReader {
  const char* key;
  std::function<void(const Field&)> read;
};

struct IntRange {
  int64_t min;
  int64_t max;
};

constexpr int64_t kIntMin = std::numeric_limits<int32_t>::min();
constexpr int64_t kIntMax = std::numeric_limits<int32_t>::max();
constexpr IntRange kAnyInt{kIntMin, kIntMax};
constexpr IntRange kNonNegative{0, kIntMax};

template <typename T>
using Choices = std::vector<std::pair<const char*, T>>;

Choices<kvc_dtype> format_choices() {
  Choices<kvc_dtype> formats;
  for (int code = 0; code < KVC_FORMAT_CODE_END; ++code) {
    if (kvc_format_is_valid(code)) formats.emplace_back(kvc_format_name(code), kvc_dtype(code));
  }
  return formats;
}

const Choices<kvc_dtype> kDtypes = format_choices();
const Choices<kvc_rotation> kRotations{{"none", KVC_ROTATION_NONE},
                                       {"hadamard", KVC_ROTATION_HADAMARD}};
const Choices<kvc_layout> kLayouts{{"paged", KVC_LAYOUT_PAGED},
                                   {"contiguous", KVC_LAYOUT_CONTIGUOUS}};
const Choices<bool> kBooleans{{"true", true}, {"false", false}};
const Choices<PrefillCompression> kPrefillModes{{"none", PrefillCompression::none},
                                                {"per_chunk", PrefillCompression::per_chunk},
                                                {"once", PrefillCompression::once}};

std::string describe(const YAML::Node& node) {
  switch (node.Type()) {
    case YAML::NodeType::Scalar:
      return quote(node.Scalar());
    case YAML::NodeType::Sequence:
      return "a sequence";
    case YAML::NodeType::Map:
      return "a mapping";
    default:
      return "null";
  }
}

std::string describe(const IntRange& range) {
  if (range.min == kIntMin && range.max == kIntMax) return "an integer";
  if (range.max == kIntMax) return "an integer >= " + std::to_string(range.min);
  return "an integer in " + std::to_string(range.min) + ".." + std::to_string(range.max);
}

template <typename T>
std::string describe(const Choices<T>& choices) {
  std::string names;
  for (const auto& choice : choices) {
    names += names.empty() ? "one of " : ", ";
    names += choice.first;
  }
  return names;
}

std::string describe(const std::vector<KeyReader>& readers) {
  std::string names;
  for (const KeyReader& reader : readers) {
    names += names.empty() ? "one of " : ", ";
    names += reader.key;
  }
  return names;
}

std::string child_path(const std::string& parent, const std::string& key) {
  return parent.empty() ? key : parent + "." + key;
}

// Decimal integers as YAML's core schema writes them: an optional sign, then digits.
std::optional<int64_t> parse_integer(std::string_view text) {
  const bool negative = !text.empty() && text.front() == '-';
  if (!text.empty() && (negative || text.front() == '+')) text.remove_prefix(1);
  if (!all_digits(text)) return std::nullopt;
  int64_t magnitude = 0;
  const auto [end, error] = std::from_chars(text.data(), text.data() + text.size(), magnitude);
  if (error != std::errc{}) return std::nullopt;
  return negative ? -magnitude : magnitude;
}

std::optional<double> parse_number(std::string_view text) {
  if (text.size() > 1 && text[0] == '+' && text[1] != '-') text.remove_prefix(1);
  double value = 0.0;
  const auto [end, error] = std::from_chars(text.data(), text.data() + text.size(), value);
  if (error != std::errc{} || end != text.data() + text.size() || !std::isfinite(value)) {
    return std::nullopt;
  }
  return value;
}

class ConfigReader {
 public:
  explicit ConfigReader(const std::string& source_name) : source_(printable(source_name)) {}

  Config read(const std::string& yaml_text) const {
    Config config;
    const Field document = load_document(yaml_text);
    std::optional<Field> cache_section;
    std::map<std::string, Field> cache_fields;
    if (document.value.IsNull()) {  // empty, only comments, or an explicit null
      config.cache = resolve_cache_config(config.cache);
      return config;
    }
    if (!document.value.IsMap()) {
      fail_value(document, "expected a mapping, got " + describe(document.value));
    }
    const std::vector<KeyReader> keys{
        {"threads", [&](const Field& f) { config.threads = read_int(f, kNonNegative); }},
        {"plugins", [&](const Field& f) { config.plugin_paths = read_plugins(f); }},
        {"backend", [&](const Field& f) { read_backend(f, config.cache); }},
        {"cache",
         [&](const Field& f) {
           read_cache(f, config.cache, cache_fields);
           cache_section = f;
         }},
        {"policy", [&](const Field& f) { config.policy = read_policy(f); }},
        {"prefix_cache",
         [&](const Field& f) {
           read_prefix_cache(f, config.cache.prefix_cache);
           cache_fields.emplace("prefix_cache", f);
         }},
        {"stores", [&](const Field& f) { config.stores = read_stores(f); }},
    };
    read_section(document, keys);
    config.cache = resolve_cache(config.cache, cache_section.value_or(document), cache_fields);
    return config;
  }

 private:
  std::string source_;  // printable, for messages

  [[noreturn]] void fail(const YAML::Mark& mark, const std::string& path,
                         const std::string& problem) const {
    const std::string where = source_ + ":" + std::to_string(mark.line + 1) + ": ";
    throw Error(KVC_ERR_CONFIG,
                where + (path.empty() ? "top level" : printable(path)) + ": " + problem);
  }

  // An empty value ("key:" then a new line) has its mark on the next line, so use the key's.
  [[noreturn]] void fail_value(const Field& field, const std::string& problem) const {
    fail(field.value.IsNull() ? field.key_mark : field.value.Mark(), field.path, problem);
  }

  [[noreturn]] void fail_syntax(const YAML::Mark& mark, const std::string& problem) const {
    throw Error(KVC_ERR_CONFIG,
                source_ + ":" + std::to_string(mark.line + 1) + ": YAML syntax error: " + problem);
  }

  // yaml-cpp 0.7.0 cannot start a document at a token such as a ',' outside [ ] and { }: it
  // reads an empty document without consuming the token, again and again, so YAML::LoadAll
  // collects empty documents until memory runs out. A document that starts where the
  // previous one did is that token, found here with a parser that stores nothing.
  void check_documents_advance(const std::string& yaml_text) const {
    std::istringstream input(yaml_text);
    YAML::Parser parser(input);
    DocumentStarts starts;
    std::optional<YAML::Mark> previous;
    while (parser.HandleNextDocument(starts)) {
      const YAML::Mark& start = starts.last();
      if (previous && previous->pos == start.pos) {
        const size_t pos = static_cast<size_t>(start.pos);
        const std::string token = pos < yaml_text.size() ? yaml_text.substr(pos, 1) : "";
        fail_syntax(start, "unexpected " + quote(token) + " at column " +
                               std::to_string(start.column + 1) + " where a value should start");
      }
      previous = start;
    }
  }

  Field load_document(const std::string& yaml_text) const {
    std::vector<YAML::Node> documents;
    try {
      check_documents_advance(yaml_text);
      documents = YAML::LoadAll(yaml_text);
    } catch (const YAML::Exception& e) {
      fail_syntax(e.mark, e.msg);
    }
    if (documents.empty()) return Field{"", YAML::Mark{}, YAML::Node{}};
    if (documents.size() > 1) {
      fail(documents[1].Mark(), "",
           "expected a single YAML document, got " + std::to_string(documents.size()));
    }
    return Field{"", documents[0].Mark(), documents[0]};
  }

  using EntryVisitor = std::function<void(const std::string& key, const Field&)>;

  // Calls visit for each entry of a mapping section, after checking its key is a unique name.
  // An empty section ("cache:" with nothing under it) has no entries.
  void for_each_entry(const Field& section, const EntryVisitor& visit) const {
    if (section.value.IsNull()) return;
    if (!section.value.IsMap()) {
      fail_value(section, "expected a mapping, got " + describe(section.value));
    }
    std::map<std::string, int> first_line_of_key;
    for (const auto& entry : section.value) {
      const YAML::Node& key = entry.first;
      if (!key.IsScalar()) {
        fail(key.Mark(), section.path, "expected a key name, got " + describe(key));
      }
      const Field field{child_path(section.path, key.Scalar()), key.Mark(), entry.second};
      const auto [first, inserted] = first_line_of_key.emplace(key.Scalar(), key.Mark().line + 1);
      if (!inserted) {
        fail(key.Mark(), field.path,
             "duplicate key (first at line " + std::to_string(first->second) + ")");
      }
      visit(key.Scalar(), field);
    }
  }

  void read_section(const Field& section, const std::vector<KeyReader>& readers) const {
    for_each_entry(section, [&](const std::string& key, const Field& field) {
      for (const KeyReader& reader : readers) {
        if (key == reader.key) return reader.read(field);
      }
      fail(field.key_mark, field.path, "unknown key, expected " + describe(readers));
    });
  }

  KeyReader int_key(const char* key, int32_t& target, IntRange range) const {
    return {key, [this, &target, range](const Field& f) { target = read_int(f, range); }};
  }

  template <typename T>
  KeyReader choice_key(const char* key, T& target, const Choices<T>& choices) const {
    return {key, [this, &target, &choices](const Field& f) { target = read_choice(f, choices); }};
  }

  std::string read_scalar(const Field& field, const std::string& expected) const {
    if (!field.value.IsScalar()) {
      fail_value(field, "expected " + expected + ", got " + describe(field.value));
    }
    return field.value.Scalar();
  }

  std::string read_name(const Field& field) const {
    const std::string name = read_scalar(field, "a name");
    if (name.empty()) fail_value(field, "expected a name, got ''");
    return name;
  }

  int32_t read_int(const Field& field, IntRange range) const {
    const std::string text = read_scalar(field, describe(range));
    const std::optional<int64_t> value = parse_integer(text);
    if (!value || *value < range.min || *value > range.max) {
      fail_value(field, "expected " + describe(range) + ", got " + quote(text));
    }
    return static_cast<int32_t>(*value);
  }

  template <typename T>
  T read_choice(const Field& field, const Choices<T>& choices) const {
    const std::string text = read_scalar(field, describe(choices));
    for (const auto& [name, value] : choices) {
      if (text == name) return value;
    }
    fail_value(field, "expected " + describe(choices) + ", got " + quote(text));
  }

  double read_number(const Field& field) const {
    const std::string text = read_scalar(field, "a number");
    const std::optional<double> value = parse_number(text);
    if (!value) fail_value(field, "expected a number, got " + quote(text));
    return *value;
  }

  size_t read_byte_size(const Field& field) const {
    const std::string text = read_scalar(field, "a byte size such as 2GiB");
    try {
      return parse_byte_size(text);
    } catch (const std::invalid_argument& e) {
      fail_value(field, e.what());
    }
  }

  std::vector<std::string> read_plugins(const Field& section) const {
    std::vector<std::string> paths;
    read_section(section, {{"paths", [&](const Field& f) { paths = read_path_list(f); }}});
    return paths;
  }

  std::vector<std::string> read_path_list(const Field& field) const {
    std::vector<std::string> paths;
    if (field.value.IsNull()) return paths;
    if (!field.value.IsSequence()) {
      fail_value(field, "expected a sequence of paths, got " + describe(field.value));
    }
    for (size_t i = 0; i < field.value.size(); ++i) {
      const Field item{field.path + "[" + std::to_string(i) + "]", field.key_mark, field.value[i]};
      const std::string path = read_scalar(item, "a path");
      if (path.empty()) fail_value(item, "expected a path, got ''");
      paths.push_back(path);
    }
    return paths;
  }

  // Reads the values' types only; resolve_cache() applies the limits every entry point shares.
  void read_cache(const Field& section, CacheConfig& cache,
                  std::map<std::string, Field>& fields) const {
    std::optional<kvc_dtype> both, k, v;  // `dtype` sets K and V, k_dtype and v_dtype override
    const auto field = [&](const char* key, const std::function<void(const Field&)>& read) {
      return KeyReader{key, [&fields, key, read](const Field& f) {
                         read(f);
                         fields.emplace(key, f);
                       }};
    };
    const std::vector<KeyReader> keys{
        field("layers", [&](const Field& f) { cache.layers = read_int(f, kAnyInt); }),
        field("kv_heads", [&](const Field& f) { cache.kv_heads = read_int(f, kAnyInt); }),
        field("q_heads", [&](const Field& f) { cache.q_heads = read_int(f, kAnyInt); }),
        field("head_dim", [&](const Field& f) { cache.head_dim = read_int(f, kAnyInt); }),
        field("dtype", [&](const Field& f) { both = read_choice(f, kDtypes); }),
        field("k_dtype", [&](const Field& f) { k = read_choice(f, kDtypes); }),
        field("v_dtype", [&](const Field& f) { v = read_choice(f, kDtypes); }),
        field("k_rotation", [&](const Field& f) { cache.k_rotation = read_choice(f, kRotations); }),
        field("layout", [&](const Field& f) { cache.layout = read_choice(f, kLayouts); }),
        field("block_tokens", [&](const Field& f) { cache.block_tokens = read_int(f, kAnyInt); }),
        field("growth_factor", [&](const Field& f) { cache.growth_factor = read_number(f); }),
        field("memory_limit", [&](const Field& f) { cache.memory_limit = read_byte_size(f); }),
    };
    read_section(section, keys);
    cache.k_dtype = k.value_or(both.value_or(cache.k_dtype));
    cache.v_dtype = v.value_or(both.value_or(cache.v_dtype));
  }

  void read_prefix_cache(const Field& section, PrefixCacheConfig& prefix) const {
    const std::vector<KeyReader> keys{
        {"enabled", [&](const Field& f) { prefix.enabled = read_choice(f, kBooleans); }},
        {"store", [&](const Field& f) { prefix.store = read_name(f); }},
        {"write_through", [&](const Field& f) { prefix.write_through = read_choice(f, kBooleans); }},
    };
    read_section(section, keys);
  }

  // The shared defaults and checks; a refused value is reported at its key's line.
  CacheConfig resolve_cache(const CacheConfig& cache, const Field& section,
                            const std::map<std::string, Field>& fields) const {
    const CacheConfig resolved = with_cache_defaults(cache);
    if (const auto problem = find_cache_param_problem(resolved)) {
      const auto it = fields.find(problem->field);
      if (it != fields.end()) fail_value(it->second, problem->message);
      fail(section.key_mark, "cache." + problem->field, problem->message);
    }
    return resolved;
  }

  // `backend: cpu`, or a mapping with the name, the device ordinal and the plugin's params.
  void read_backend(const Field& field, CacheConfig& cache) const {
    if (!field.value.IsMap()) {
      cache.backend = read_name(field);
      return;
    }
    bool has_name = false;
    const std::vector<KeyReader> keys{
        {"name",
         [&](const Field& f) {
           cache.backend = read_name(f);
           has_name = true;
         }},
        int_key("device", cache.backend_device, kNonNegative),
        {"params", [&](const Field& f) { cache.backend_params = read_params(f); }},
    };
    read_section(field, keys);
    if (!has_name) {
      fail(field.key_mark, child_path(field.path, "name"),
           "missing, a backend section needs a name");
    }
  }

  PolicyConfig read_policy(const Field& section) const {
    PolicyConfig policy;
    bool has_name = false;
    const std::vector<KeyReader> keys{
        {"name",
         [&](const Field& f) {
           policy.name = read_name(f);
           has_name = true;
         }},
        {"budget", [&](const Field& f) { read_budget(f, policy); }},
        int_key("sinks", policy.sinks, kNonNegative),
        int_key("recent", policy.recent, kNonNegative),
        {"params", [&](const Field& f) { policy.params = read_params(f); }},
        {"compress", [&](const Field& f) { read_compress(f, policy); }},
        {"demote", [&](const Field& f) { read_demote(f, policy.demote); }},
    };
    read_section(section, keys);
    if (!has_name) {
      fail(section.key_mark, child_path(section.path, "name"),
           "missing, a policy section needs a name");
    }
    return policy;
  }

  // `format` sets K's and V's demoted format, `k_format` and `v_format` override it.
  void read_demote(const Field& section, DemoteConfig& demote) const {
    std::optional<kvc_dtype> both, k, v;
    const std::vector<KeyReader> keys{
        {"format", [&](const Field& f) { both = read_choice(f, kDtypes); }},
        {"k_format", [&](const Field& f) { k = read_choice(f, kDtypes); }},
        {"v_format", [&](const Field& f) { v = read_choice(f, kDtypes); }},
        {"keep",
         [&](const Field& f) {
           const std::string expected = "a number in [0, 1]";
           const std::string text = read_scalar(f, expected);
           const std::optional<double> share = parse_number(text);
           if (!share || !(*share >= 0.0 && *share <= 1.0)) {
             fail_value(f, "expected " + expected + ", got " + quote(text));
           }
           demote.keep = *share;
         }},
    };
    read_section(section, keys);
    if (!both && !k && !v) {
      fail(section.key_mark, child_path(section.path, "format"),
           "missing, demote needs a format (or k_format, v_format)");
    }
    demote.enabled = true;
    demote.k_dtype = k ? k : both;
    demote.v_dtype = v ? v : both;
  }

  // An integer is a token count; a fraction is a share of each sequence's tokens.
  void read_budget(const Field& field, PolicyConfig& policy) const {
    const std::string expected = "an integer >= 1 (tokens) or a number in (0, 1] (ratio)";
    const std::string text = read_scalar(field, expected);
    if (const std::optional<int64_t> tokens = parse_integer(text)) {
      if (*tokens >= 1 && *tokens <= kIntMax) {
        policy.budget_tokens = static_cast<int32_t>(*tokens);
        return;
      }
    } else if (const std::optional<double> ratio = parse_number(text)) {
      if (*ratio > 0.0 && *ratio <= 1.0) {
        policy.budget_ratio = *ratio;
        return;
      }
    }
    fail_value(field, "expected " + expected + ", got " + quote(text));
  }

  std::vector<std::pair<std::string, std::string>> read_params(const Field& section) const {
    std::vector<std::pair<std::string, std::string>> params;
    for_each_entry(section, [&](const std::string& key, const Field& field) {
      params.emplace_back(key, read_scalar(field, "a scalar value"));
    });
    return params;
  }

  std::vector<StoreConfig> read_stores(const Field& section) const {
    std::vector<StoreConfig> stores;
    for_each_entry(section, [&](const std::string& name, const Field& field) {
      if (name.empty()) fail(field.key_mark, section.path, "a store name must not be empty");
      stores.push_back(read_store(name, field));
    });
    return stores;
  }

  StoreConfig read_store(const std::string& name, const Field& section) const {
    StoreConfig store{name, "", {}};
    bool has_plugin = false;
    if (section.value.IsNull()) {
      fail_value(section, "expected a mapping with a plugin, got " + describe(section.value));
    }
    const std::vector<KeyReader> keys{
        {"plugin",
         [&](const Field& f) {
           store.plugin = read_name(f);
           has_plugin = true;
         }},
        {"params", [&](const Field& f) { store.params = read_params(f); }},
    };
    read_section(section, keys);
    if (!has_plugin) {
      fail(section.key_mark, child_path(section.path, "plugin"),
           "missing, a store needs a plugin");
    }
    return store;
  }

  void read_compress(const Field& section, PolicyConfig& policy) const {
    const std::vector<KeyReader> keys{
        choice_key("prefill", policy.prefill, kPrefillModes),
        int_key("decode_every", policy.decode_every, kNonNegative),
        int_key("decode_slack", policy.decode_slack, kNonNegative),
    };
    read_section(section, keys);
  }
};

}  // namespace

Config parse_config(const std::string& yaml_text, const std::string& source_name) {
  return ConfigReader(source_name).read(yaml_text);
}

size_t parse_byte_size(const std::string& text) {
  return plugin::parse_byte_size(text, quote);
}

}  // namespace kvc
