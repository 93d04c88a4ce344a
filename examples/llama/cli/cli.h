/*
 * kvc-llama's shared pieces: the subcommands, option parsing, and the session (model,
 * tokenizer, kvcache context and cache, engine) every subcommand opens.
 *
 * Adding a subcommand: write cli/cmd_<name>.c with `int kvl_cmd_<name>(int argc, char **argv)`
 * (argv[0] is the subcommand's name), declare it below, add a row to the table in main.c and
 * the file to KVL_CLI_SOURCES in examples/llama/CMakeLists.txt.
 */
#ifndef KVC_LLAMA_CLI_H
#define KVC_LLAMA_CLI_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "llama.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Exit statuses: 0 success, 1 a failure while running, 2 a usage error. */
enum { KVL_EXIT_OK = 0, KVL_EXIT_FAILURE = 1, KVL_EXIT_USAGE = 2 };

/* ------------------------------------------------------------------ subcommands */

int kvl_cmd_generate(int argc, char **argv);
int kvl_cmd_ppl(int argc, char **argv);
int kvl_cmd_eval(int argc, char **argv);
int kvl_cmd_compare(int argc, char **argv);
/* kvc-llama eval --retrieval (eval_retrieval.c). */
int kvl_eval_retrieval(int argc, char **argv);

/* ------------------------------------------------------------------ options */

/** One option: "--name VALUE" (value != NULL) or the flag "--name" (flag != NULL). */
typedef struct kvl_cli_option {
  const char *name;
  const char **value; /* receives the argument (argv storage); NULL for a flag */
  int *flag;          /* set to 1 when the flag is present; NULL for an option with a value */
} kvl_cli_option;

/** Parses argv[1..argc) of subcommand argv[0]. Returns KVL_EXIT_OK, KVL_EXIT_USAGE after
 * printing the problem and `usage` to stderr, or -1 after printing `usage` to stdout for
 * --help / -h (the caller then exits with 0). "--name=VALUE" is accepted too. */
int kvl_cli_parse(int argc, char **argv, const char *usage, const kvl_cli_option *options,
                  size_t n_options);
/** Prints "kvc-llama <command>: <message>" and the usage to stderr; returns KVL_EXIT_USAGE. */
int kvl_cli_usage_error(const char *command, const char *usage, const char *format, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 3, 4)))
#endif
    ;
/** Parses an integer option in [min, max]; on error prints it (usage error) and returns
 * KVL_EXIT_USAGE. A NULL text leaves *out unchanged. */
int kvl_cli_int(const char *command, const char *usage, const char *option, const char *text,
                long min, long max, int32_t *out);
/** Parses a finite number >= min. */
int kvl_cli_double(const char *command, const char *usage, const char *option, const char *text,
                   double min, double *out);

/* The storage options of `eval` and `eval --retrieval`: the cache's format of K and V and
 * "demote before evict" for the runs with a policy. KVL_CLI_STORAGE_OPTIONS(t) gives the
 * option rows that fill a kvl_cli_storage_text t; KVL_CLI_STORAGE_USAGE their usage lines. */
typedef struct kvl_cli_storage_text {
  const char *dtype, *full_dtype, *demote, *demote_keep;
} kvl_cli_storage_text;

#define KVL_CLI_STORAGE_OPTIONS(t)                                                            \
  {"--dtype", &(t).dtype, NULL}, {"--full-dtype", &(t).full_dtype, NULL},                     \
      {"--demote", &(t).demote, NULL}, {"--demote-keep", &(t).demote_keep, NULL}
#define KVL_CLI_STORAGE_USAGE                                                                 \
  "  --dtype F          storage format of K and V in every run, the full cache's too:\n"      \
  "                     f32 (default), f16, bf16, q8_0 or q4_0\n"                             \
  "  --full-dtype F     the full cache's format instead (default: --dtype); with\n"           \
  "                     --policies full, the full policy's rows then measure --dtype\n"       \
  "                     alone against the full cache in F\n"                                  \
  "  --demote F         demote before evict in every run with a policy: the tokens its\n"     \
  "                     budget cannot keep in --dtype are stored as F (a smaller format)\n"   \
  "                     before any is evicted; the budget then counts bytes (that many\n"     \
  "                     tokens' bytes in --dtype). Default: none\n"                           \
  "  --demote-keep R    with --demote: the share of a head's budget kept in --dtype, in\n"    \
  "                     [0, 1] (default: the library's, 0.25)\n"

/** The parsed storage options: dtype for the runs with a policy, full_dtype for the full
 * cache; demote -1: none; demote_keep < 0: the library's default. */
typedef struct kvl_cli_storage {
  int32_t dtype, full_dtype, demote;
  double demote_keep;
} kvl_cli_storage;

/** Parses the storage options' texts (NULL: not given) into *out; on error prints it (usage
 * error) and returns KVL_EXIT_USAGE. */
int kvl_cli_storage_parse(const char *command, const char *usage,
                          const kvl_cli_storage_text *text, kvl_cli_storage *out);
/** Sets the cache formats in *params: with_policy nonzero, dtype and the demotion; zero (the
 * full cache), full_dtype. */
void kvl_cli_storage_apply(const kvl_cli_storage *storage, int with_policy,
                           kvc_cache_params *params);
/** The demote_keep in effect: --demote-keep, else the library's default. */
double kvl_cli_storage_keep(const kvl_cli_storage *storage);
/** Creates and destroys a cache for `model` with `storage` and `policy`, so that a setting the
 * library or its backend refuses (demotion without the backend's convert, say) fails before
 * any run. Returns 0, or -1 after printing the error. */
int kvl_cli_storage_check(kvc_context *context, const kvl_model *model,
                          const kvl_cli_storage *storage, const char *policy);
/** "K/V f16, policies demote to q4_0 (keep 0.25)" or "K/V f32, no demotion" into out. */
void kvl_cli_storage_describe(const kvl_cli_storage *storage, char *out, size_t size);

/* ------------------------------------------------------------------ session */

typedef struct kvl_cli_session {
  kvl_model *model;
  kvl_tokenizer *tokenizer;
  kvc_context *context;
  kvc_cache *cache;
  kvl_engine *engine;
} kvl_cli_session;

/** Loads the model and tokenizer and creates the context and cache (see
 * kvl_cli_create_cache()). Prints any error; returns KVL_EXIT_OK or KVL_EXIT_FAILURE. */
int kvl_cli_open(kvl_cli_session *session, const char *model_path, const char *tokenizer_path,
                 const char *config_path);
/** The tokenizer file to load: tokenizer_path, else the model itself when it is a GGUF file;
 * NULL after printing an error. */
const char *kvl_cli_tokenizer_path(const char *model_path, const char *tokenizer_path);
/** Creates the session's engine for steps of at most max_batch_tokens tokens. */
int kvl_cli_open_engine(kvl_cli_session *session, int32_t max_batch_tokens);
/** Frees everything the session holds (in the right order); accepts a zeroed session. */
void kvl_cli_close(kvl_cli_session *session);

/**
 * Creates a kvcache context and a cache shaped for `model`.
 *
 * Without a config file: a default context and a cache with f32 storage, the paged layout,
 * the default memory limit (1 GiB) and no policy.
 *
 * With a config file (the YAML of docs/config.md): the context is created from the file
 * itself (so its plugin paths, threads and every error message with file:line come from the
 * library's own parser), and the cache from the file's `cache`, `backend` and `policy`
 * sections, except that the model dictates the shape: `layers`, `kv_heads`, `q_heads` and
 * `head_dim` are replaced by the model's (with a note on stderr when the file said otherwise),
 * and `dtype` is f32 when the file does not name one. Error messages start with `option`, the
 * command-line option that named the file. Implemented in cache_config.cpp.
 */
int kvl_cli_create_cache(const kvl_model *model, const char *config_path, const char *option,
                         kvc_context **out_context, kvc_cache **out_cache, char *error,
                         size_t error_size);

/** One line describing the cache (dtype, layout, limit, policy) to `out`. */
void kvl_cli_print_cache_config(FILE *out, const kvc_cache *cache);
/** One line of the cache's counters (peak bytes, tokens stored and evicted) to `out`. */
void kvl_cli_print_cache_stats(FILE *out, const kvc_cache *cache);
/* Reads the cache's stats into *stats; returns 0, or -1 (the status is dropped). */
int kvl_cli_read_stats(const kvc_cache *cache, kvc_cache_stats *stats);

/* ------------------------------------------------------------------ prefix store */

/** generate --prefix-store: the store (a name from the context's `stores:` section), the
 * chunk size and the model fingerprint that key the prompt prefix's K/V (prefix_store.c). */
typedef struct kvl_cli_prefix_store {
  const char *name;
  int32_t chunk_tokens;
  char model_fingerprint[160];
} kvl_cli_prefix_store;

/** The model file's fingerprint: its size and an XXH3-128 of its first and last MiB (the
 * header included), as text. Returns 0, or -1 after printing an error. */
int kvl_cli_model_fingerprint(const char *path, char *out, size_t out_size);
/** Creates sequence `seq` holding the longest prefix of the prompt tokens[0, n_tokens) whose
 * chunks the store has (kvc_prefix_load), less what must be prefilled again, and sets
 * *out_restored to the tokens it holds: when prefill_chunk (the prefill's step) divides the
 * store's chunk, the prefix stops before the chunk of the last token, so that the steps after
 * it are those of a prefill from 0 and the logits equal its bit for bit; otherwise it stops
 * before the last token only. Returns 0, or -1 after printing the error (no sequence then). */
int kvl_cli_prefix_load(kvc_cache *cache, int32_t seq, const kvl_cli_prefix_store *store,
                        const int32_t *tokens, int32_t n_tokens, int32_t prefill_chunk,
                        int32_t *out_restored);
/** Saves the whole chunks of tokens[0, n_tokens) that sequence `seq` holds (kvc_prefix_save,
 * skipping chunks the store has) and sets *out_saved to the tokens they cover. Returns 0, or
 * -1 after printing the error. */
int kvl_cli_prefix_save(kvc_cache *cache, int32_t seq, const kvl_cli_prefix_store *store,
                        const int32_t *tokens, int32_t n_tokens, int32_t *out_saved);

/* ------------------------------------------------------------------ helpers */

/** Seconds on a monotonic clock. */
double kvl_cli_now(void);
/** Reads a whole file as a NUL-terminated string (malloc'd); NULL after printing an error. */
char *kvl_cli_read_text(const char *path, size_t *out_size);
/** kvl_token_ids_read: whitespace-separated decimal token ids, each checked against the
 * vocabulary (malloc'd); NULL after printing an error. */
int32_t *kvl_cli_read_ids(const char *path, int32_t vocab, int32_t *out_count);
/** The tokens of a text to score (malloc'd): `text` (text_size bytes, read from text_path)
 * encoded without BOS, or the ids at ids_path when text is NULL (kvl_cli_read_ids). NULL
 * after printing an error. */
int32_t *kvl_cli_text_tokens(const kvl_tokenizer *tokenizer, const char *text, size_t text_size,
                             const char *text_path, const char *ids_path, int32_t vocab,
                             int32_t *out_count);
/** Prints a note when windows of `window` tokens are longer than the model's context. */
void kvl_cli_note_window(const kvl_model *model, int32_t window);
/** Writes n floats to `path` as raw bytes in this machine's order (compare with cmp); 0, or
 * -1 after printing an error. */
int kvl_cli_write_floats(const char *path, const float *values, size_t n);
/** Prints a decoded piece, skipping lone control bytes other than whitespace (as run.c). */
void kvl_cli_print_piece(FILE *out, const char *piece);
/** The index of the largest logit. */
int32_t kvl_cli_argmax(const float *logits, int32_t n);
/** Prints "kvc-llama: error: ..." to stderr. */
void kvl_cli_error(const char *format, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 1, 2)))
#endif
    ;

#ifdef __cplusplus
}
#endif

#endif /* KVC_LLAMA_CLI_H */
