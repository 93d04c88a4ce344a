/* kvc-llama: option parsing, the session every subcommand opens, small helpers. */
#define _POSIX_C_SOURCE 200809L

#include <ctype.h>
#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <kvcache/kvcache_format.h>

#include "cli.h"

void kvl_cli_error(const char *format, ...) {
  va_list args;
  fputs("kvc-llama: error: ", stderr);
  va_start(args, format);
  vfprintf(stderr, format, args);
  va_end(args);
  fputc('\n', stderr);
}

int kvl_cli_usage_error(const char *command, const char *usage, const char *format, ...) {
  va_list args;
  fprintf(stderr, "kvc-llama %s: ", command);
  va_start(args, format);
  vfprintf(stderr, format, args);
  va_end(args);
  fprintf(stderr, "\n\n%s", usage);
  return KVL_EXIT_USAGE;
}

int kvl_cli_parse(int argc, char **argv, const char *usage, const kvl_cli_option *options,
                  size_t n_options) {
  int i;
  for (i = 1; i < argc; ++i) {
    const char *arg = argv[i];
    const char *eq = strchr(arg, '=');
    size_t name_len = eq ? (size_t)(eq - arg) : strlen(arg);
    size_t o;
    if (strcmp(arg, "--help") == 0 || strcmp(arg, "-h") == 0) {
      fputs(usage, stdout);
      return -1;
    }
    if (strncmp(arg, "--", 2) != 0) {
      return kvl_cli_usage_error(argv[0], usage, "unexpected argument '%s'", arg);
    }
    for (o = 0; o < n_options; ++o) {
      if (strlen(options[o].name) == name_len && strncmp(arg, options[o].name, name_len) == 0) {
        break;
      }
    }
    if (o == n_options) {
      return kvl_cli_usage_error(argv[0], usage, "unknown option '%.*s'", (int)name_len, arg);
    }
    if (options[o].value != NULL) {
      if (eq != NULL) {
        *options[o].value = eq + 1;
      } else if (i + 1 < argc) {
        *options[o].value = argv[++i];
      } else {
        return kvl_cli_usage_error(argv[0], usage, "option '%s' needs a value", options[o].name);
      }
    } else {
      if (eq != NULL) {
        return kvl_cli_usage_error(argv[0], usage, "option '%s' takes no value", options[o].name);
      }
      *options[o].flag = 1;
    }
  }
  return KVL_EXIT_OK;
}

int kvl_cli_int(const char *command, const char *usage, const char *option, const char *text,
                long min, long max, int32_t *out) {
  char *end;
  long value;
  if (text == NULL) return KVL_EXIT_OK;
  errno = 0;
  value = strtol(text, &end, 10);
  if (end == text || *end != '\0' || errno != 0 || value < min || value > max) {
    return kvl_cli_usage_error(command, usage, "%s expects an integer in %ld..%ld, got '%s'",
                               option, min, max, text);
  }
  *out = (int32_t)value;
  return KVL_EXIT_OK;
}

int kvl_cli_double(const char *command, const char *usage, const char *option, const char *text,
                   double min, double *out) {
  char *end;
  double value;
  if (text == NULL) return KVL_EXIT_OK;
  errno = 0;
  value = strtod(text, &end);
  if (end == text || *end != '\0' || errno != 0 || !isfinite(value) || value < min) {
    return kvl_cli_usage_error(command, usage, "%s expects a number >= %g, got '%s'", option, min,
                               text);
  }
  *out = value;
  return KVL_EXIT_OK;
}

/* The ::kvc_dtype named `name` (kvc_format_name), or -1. */
static int32_t format_named(const char *name) {
  int32_t f;
  for (f = 0; f < KVC_FORMAT_CODE_END; ++f) {
    if (kvc_format_is_valid(f) && strcmp(kvc_format_name(f), name) == 0) return f;
  }
  return -1;
}

int kvl_cli_storage_parse(const char *command, const char *usage,
                          const kvl_cli_storage_text *text, kvl_cli_storage *out) {
  out->dtype = KVC_DTYPE_F32;
  out->demote = -1;
  out->demote_keep = -1.0;
  if (text->dtype != NULL && (out->dtype = format_named(text->dtype)) < 0) {
    return kvl_cli_usage_error(command, usage,
                               "--dtype expects f32, f16, bf16, q8_0 or q4_0, got '%s'",
                               text->dtype);
  }
  out->full_dtype = out->dtype;
  if (text->full_dtype != NULL && (out->full_dtype = format_named(text->full_dtype)) < 0) {
    return kvl_cli_usage_error(command, usage,
                               "--full-dtype expects f32, f16, bf16, q8_0 or q4_0, got '%s'",
                               text->full_dtype);
  }
  if (text->demote != NULL && (out->demote = format_named(text->demote)) < 0) {
    return kvl_cli_usage_error(command, usage,
                               "--demote expects f32, f16, bf16, q8_0 or q4_0, got '%s'",
                               text->demote);
  }
  if (text->demote_keep != NULL) {
    int rc;
    if (text->demote == NULL) {
      return kvl_cli_usage_error(command, usage, "--demote-keep needs --demote");
    }
    rc = kvl_cli_double(command, usage, "--demote-keep", text->demote_keep, 0.0,
                        &out->demote_keep);
    if (rc != KVL_EXIT_OK) return rc;
    if (out->demote_keep > 1.0) {
      return kvl_cli_usage_error(command, usage,
                                 "--demote-keep expects a number in [0, 1], got '%s'",
                                 text->demote_keep);
    }
  }
  return KVL_EXIT_OK;
}

void kvl_cli_storage_apply(const kvl_cli_storage *storage, int with_policy,
                           kvc_cache_params *params) {
  params->dtype = (kvc_dtype)(with_policy ? storage->dtype : storage->full_dtype);
  if (!with_policy || storage->demote < 0) return;
  params->demote_k_dtype = storage->demote;
  params->demote_v_dtype = storage->demote;
  if (storage->demote_keep >= 0.0) params->demote_keep = storage->demote_keep;
}

double kvl_cli_storage_keep(const kvl_cli_storage *storage) {
  kvc_cache_params defaults;
  if (storage->demote_keep >= 0.0) return storage->demote_keep;
  kvc_cache_params_init(&defaults);
  return defaults.demote_keep;
}

void kvl_cli_storage_describe(const kvl_cli_storage *storage, char *out, size_t size) {
  char full[48] = "";
  if (storage->full_dtype != storage->dtype) {
    snprintf(full, sizeof full, " (the full cache %s)", kvc_format_name(storage->full_dtype));
  }
  if (storage->demote < 0) {
    snprintf(out, size, "K/V %s%s, no demotion", kvc_format_name(storage->dtype), full);
  } else {
    snprintf(out, size, "K/V %s%s, policies demote to %s (keep %g)",
             kvc_format_name(storage->dtype), full, kvc_format_name(storage->demote),
             kvl_cli_storage_keep(storage));
  }
}

int kvl_cli_storage_check(kvc_context *context, const kvl_model *model,
                          const kvl_cli_storage *storage, const char *policy) {
  kvc_cache_params p;
  kvc_cache *cache = NULL;
  kvc_status *status;
  kvl_cache_params_for(model, &p);
  kvl_cli_storage_apply(storage, policy != NULL, &p);
  p.policy = policy;
  p.budget = policy != NULL ? 64 : 0;
  status = kvc_cache_create(context, &p, &cache);
  if (status == NULL) {
    kvc_cache_destroy(cache);
    return 0;
  }
  kvl_cli_error("kvc_cache_create (%s, policy %s): %s: %s", kvc_format_name(storage->dtype),
                policy != NULL ? policy : "none",
                kvc_status_code_name(kvc_status_get_code(status)), kvc_status_message(status));
  kvc_status_free(status);
  return -1;
}

const char *kvl_cli_tokenizer_path(const char *model_path, const char *tokenizer_path) {
  if (tokenizer_path != NULL) return tokenizer_path;
  if (kvl_model_is_gguf(model_path)) return model_path;
  kvl_cli_error("--tokenizer is required with a llama2.c checkpoint (a GGUF model carries its "
                "own vocabulary)");
  return NULL;
}

int kvl_cli_open(kvl_cli_session *s, const char *model_path, const char *tokenizer_path,
                 const char *config_path) {
  char error[1024];
  memset(s, 0, sizeof *s);
  tokenizer_path = kvl_cli_tokenizer_path(model_path, tokenizer_path);
  if (tokenizer_path == NULL) return KVL_EXIT_FAILURE;
  if (kvl_model_load(model_path, &s->model, error, sizeof error) != 0 ||
      kvl_tokenizer_load(tokenizer_path, kvl_model_config(s->model)->vocab_size, &s->tokenizer,
                         error, sizeof error) != 0 ||
      kvl_cli_create_cache(s->model, config_path, "--config", &s->context, &s->cache, error,
                           sizeof error) != 0) {
    kvl_cli_error("%s", error);
    kvl_cli_close(s);
    return KVL_EXIT_FAILURE;
  }
  return KVL_EXIT_OK;
}

int kvl_cli_open_engine(kvl_cli_session *s, int32_t max_batch_tokens) {
  char error[1024];
  if (kvl_engine_create(s->model, s->cache, max_batch_tokens, &s->engine, error, sizeof error) !=
      0) {
    kvl_cli_error("%s", error);
    return KVL_EXIT_FAILURE;
  }
  return KVL_EXIT_OK;
}

void kvl_cli_close(kvl_cli_session *s) {
  kvl_engine_free(s->engine);
  kvc_cache_destroy(s->cache); /* before its context */
  kvc_context_destroy(s->context);
  kvl_tokenizer_free(s->tokenizer);
  kvl_model_free(s->model);
  memset(s, 0, sizeof *s);
}

static void print_bytes(FILE *out, double bytes) {
  if (bytes >= 1024.0 * 1024.0 * 1024.0) {
    fprintf(out, "%.2f GiB", bytes / (1024.0 * 1024.0 * 1024.0));
  } else if (bytes >= 1024.0 * 1024.0) {
    fprintf(out, "%.2f MiB", bytes / (1024.0 * 1024.0));
  } else {
    fprintf(out, "%.1f KiB", bytes / 1024.0);
  }
}

void kvl_cli_print_cache_config(FILE *out, const kvc_cache *cache) {
  static const char *const prefill[] = {"none", "per_chunk", "once"};
  kvc_cache_params p;
  kvc_status *status;
  memset(&p, 0, sizeof p);
  p.struct_size = sizeof p;
  status = kvc_cache_get_params(cache, &p);
  if (status != NULL) {
    kvc_status_free(status);
    return;
  }
  fprintf(out, "cache: %s", kvc_format_name(p.k_dtype));
  if (p.v_dtype != p.k_dtype) fprintf(out, " K, %s V", kvc_format_name(p.v_dtype));
  fprintf(out, " %s", p.layout == KVC_LAYOUT_PAGED ? "paged" : "contiguous");
  if (p.layout == KVC_LAYOUT_PAGED) fprintf(out, " (blocks of %d)", (int)p.block_tokens);
  fprintf(out, ", limit ");
  print_bytes(out, (double)p.memory_limit);
  fprintf(out, ", backend %s, policy ", p.backend ? p.backend : "cpu");
  if (p.policy == NULL) {
    fprintf(out, "none\n");
    return;
  }
  fprintf(out, "%s (", p.policy);
  if (p.budget > 0) {
    fprintf(out, "budget %d", (int)p.budget);
  } else if (p.budget_ratio > 0.0) {
    fprintf(out, "budget %g of each head", p.budget_ratio);
  } else {
    fprintf(out, "no budget");
  }
  fprintf(out, ", sinks %d, recent %d, prefill %s", (int)p.sinks, (int)p.recent,
          (unsigned)p.prefill < 3 ? prefill[p.prefill] : "?");
  if (p.decode_every > 0) fprintf(out, ", decode_every %d", (int)p.decode_every);
  if (p.decode_slack > 0) fprintf(out, ", decode_slack %d", (int)p.decode_slack);
  fprintf(out, ")\n");
}

int kvl_cli_read_stats(const kvc_cache *cache, kvc_cache_stats *stats) {
  kvc_status *status;
  memset(stats, 0, sizeof *stats);
  stats->struct_size = sizeof *stats;
  status = kvc_cache_get_stats(cache, stats);
  if (status == NULL) return 0;
  kvc_status_free(status);
  return -1;
}

void kvl_cli_print_cache_stats(FILE *out, const kvc_cache *cache) {
  kvc_cache_stats st;
  if (kvl_cli_read_stats(cache, &st) != 0) return;
  fprintf(out, "kvcache: peak ");
  print_bytes(out, (double)st.bytes_peak);
  fprintf(out,
          " of K/V; %llu tokens stored now, %llu evicted in all (summed over layers and KV "
          "heads)\n",
          (unsigned long long)st.tokens_stored, (unsigned long long)st.tokens_evicted);
}

double kvl_cli_now(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

char *kvl_cli_read_text(const char *path, size_t *out_size) {
  char error[1024];
  char *data = NULL;
  size_t size = 0;
  if (kvl_file_read(path, &data, &size, error, sizeof error) != 0) {
    kvl_cli_error("%s", error);
    return NULL;
  }
  if (strlen(data) != size) {
    free(data);
    kvl_cli_error("%s: the file contains a NUL byte; expected UTF-8 text", path);
    return NULL;
  }
  if (out_size != NULL) *out_size = size;
  return data;
}

int32_t *kvl_cli_read_ids(const char *path, int32_t vocab, int32_t *out_count) {
  char error[1024];
  int32_t *ids = NULL;
  if (kvl_token_ids_read(path, vocab, &ids, out_count, error, sizeof error) != 0) {
    kvl_cli_error("%s", error);
    return NULL;
  }
  return ids;
}

int32_t *kvl_cli_text_tokens(const kvl_tokenizer *tokenizer, const char *text, size_t text_size,
                             const char *text_path, const char *ids_path, int32_t vocab,
                             int32_t *out_count) {
  int32_t *tokens;
  if (text == NULL) return kvl_cli_read_ids(ids_path, vocab, out_count);
  tokens = (int32_t *)malloc((text_size + 3) * sizeof(int32_t));
  if (tokens == NULL) {
    kvl_cli_error("out of host memory");
    return NULL;
  }
  *out_count = kvl_tokenizer_encode(tokenizer, text, 0, 0, tokens, (int32_t)text_size + 3);
  if (*out_count < 0) {
    free(tokens);
    kvl_cli_error("%s: the tokenizer cannot encode this text", text_path);
    return NULL;
  }
  return tokens;
}

void kvl_cli_note_window(const kvl_model *model, int32_t window) {
  if (window > kvl_model_config(model)->seq_len) {
    fprintf(stderr, "kvc-llama: note: --window %d is longer than the model's context %d\n",
            (int)window, (int)kvl_model_config(model)->seq_len);
  }
}

int kvl_cli_write_floats(const char *path, const float *values, size_t n) {
  FILE *f = fopen(path, "wb");
  int failed;
  if (f == NULL) {
    kvl_cli_error("%s: cannot create: %s", path, strerror(errno));
    return -1;
  }
  failed = fwrite(values, sizeof(float), n, f) != n;
  failed |= fclose(f) != 0;
  if (failed) kvl_cli_error("%s: write error", path);
  return failed ? -1 : 0;
}

void kvl_cli_print_piece(FILE *out, const char *piece) {
  if (piece == NULL || piece[0] == '\0') return;
  if (piece[1] == '\0') {
    unsigned char b = (unsigned char)piece[0];
    if (b < 0x80 && !(isprint(b) || isspace(b))) return;
  }
  fputs(piece, out);
}

int32_t kvl_cli_argmax(const float *logits, int32_t n) {
  int32_t i, best = 0;
  for (i = 1; i < n; ++i) {
    if (logits[i] > logits[best]) best = i;
  }
  return best;
}
