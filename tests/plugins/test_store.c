/* A store plugin for the store tests: values in memory under a mutex, shared by every instance
 * created with the same `space` parameter (so two contexts in one process share values), and a
 * fault switch: `fail: put|get|exists|remove` makes that operation return KVC_ERR_IO after
 * `fail_after` successful calls (default 0) of this instance.
 * Refused variants: TEST_STORE_VARIANT 1 claims plugin ABI 1.1 (before stores), 2 lacks `exists`,
 * 3 declares a vtable without its last entry. */
#include <pthread.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kvcache/kvcache_plugin.h"

#ifndef TEST_STORE_VARIANT
#define TEST_STORE_VARIANT 0
#endif

typedef struct entry {
  char *key;
  void *value;
  size_t size;
  struct entry *next;
} entry;

typedef struct space {
  char *name;
  int users;
  entry *entries;
  struct space *next;
} space;

enum op { OP_NONE, OP_PUT, OP_GET, OP_EXISTS, OP_REMOVE };

typedef struct instance {
  space *space;
  enum op fail;
  long fail_after;
  long calls; /* of the failing operation, under the lock */
} instance;

static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static space *spaces = NULL;

static char *copy_text(const char *text) {
  size_t n = strlen(text) + 1;
  char *copy = malloc(n);
  if (copy) memcpy(copy, text, n);
  return copy;
}

static int32_t fail_with(kvc_plugin_error *error, int32_t code, const char *message) {
  snprintf(error->message, sizeof error->message, "%s", message);
  return code;
}

/* Whether this call of `op` is injected to fail; called under the lock. */
static int injected(instance *self, enum op op) {
  if (self->fail != op) return 0;
  return self->calls++ >= self->fail_after;
}

static entry **find(space *s, const char *key) {
  entry **at = &s->entries;
  while (*at && strcmp((*at)->key, key) != 0) at = &(*at)->next;
  return at;
}

static int32_t parse(const kvc_store_param *params, size_t n, const char **name, enum op *fail,
                     long *fail_after, kvc_plugin_error *error) {
  static const char *ops[] = {"none", "put", "get", "exists", "remove"};
  size_t i, o;
  for (i = 0; i < n; ++i) {
    const char *key = params[i].key, *value = params[i].value;
    if (strcmp(key, "space") == 0) {
      *name = value;
    } else if (strcmp(key, "fail") == 0) {
      for (o = 0; o < 5 && strcmp(value, ops[o]) != 0; ++o) {
      }
      if (o == 5)
        return fail_with(error, KVC_ERR_CONFIG, "fail: expected put, get, exists or remove");
      *fail = (enum op)o;
    } else if (strcmp(key, "fail_after") == 0) {
      char *end = NULL;
      *fail_after = strtol(value, &end, 10);
      if (!*value || *end || *fail_after < 0) {
        return fail_with(error, KVC_ERR_CONFIG, "fail_after: expected an integer >= 0");
      }
    } else {
      return fail_with(error, KVC_ERR_CONFIG, "unknown parameter");
    }
  }
  return KVC_OK;
}

static int32_t store_create(const kvc_host_api *host, const kvc_store_param *params,
                            size_t n_params, void **out_instance, kvc_plugin_error *error) {
  const char *name = "default";
  instance *self;
  space *s;
  int32_t code;
  (void)host;
  self = calloc(1, sizeof *self);
  if (!self) return fail_with(error, KVC_ERR_OUT_OF_MEMORY, "out of memory");
  code = parse(params, n_params, &name, &self->fail, &self->fail_after, error);
  if (code != KVC_OK) {
    free(self);
    return code;
  }
  pthread_mutex_lock(&lock);
  for (s = spaces; s && strcmp(s->name, name) != 0; s = s->next) {
  }
  if (!s) {
    s = calloc(1, sizeof *s);
    if (s) s->name = copy_text(name);
    if (!s || !s->name) {
      pthread_mutex_unlock(&lock);
      if (s) free(s);
      free(self);
      return fail_with(error, KVC_ERR_OUT_OF_MEMORY, "out of memory");
    }
    s->next = spaces;
    spaces = s;
  }
  s->users++;
  self->space = s;
  pthread_mutex_unlock(&lock);
  *out_instance = self;
  return KVC_OK;
}

static void store_destroy(void *opaque) {
  instance *self = opaque;
  space **at;
  pthread_mutex_lock(&lock);
  if (--self->space->users == 0) {
    for (at = &spaces; *at != self->space; at = &(*at)->next) {
    }
    *at = self->space->next;
    while (self->space->entries) {
      entry *e = self->space->entries;
      self->space->entries = e->next;
      free(e->key);
      free(e->value);
      free(e);
    }
    free(self->space->name);
    free(self->space);
  }
  pthread_mutex_unlock(&lock);
  free(self);
}

static int32_t store_put(void *opaque, const char *key, const void *data, size_t size,
                         kvc_plugin_error *error) {
  instance *self = opaque;
  entry **at, *e;
  void *value = malloc(size ? size : 1);
  if (!value) return fail_with(error, KVC_ERR_OUT_OF_MEMORY, "out of memory");
  if (size) memcpy(value, data, size);
  pthread_mutex_lock(&lock);
  if (injected(self, OP_PUT)) {
    pthread_mutex_unlock(&lock);
    free(value);
    return fail_with(error, KVC_ERR_IO, "injected put failure");
  }
  at = find(self->space, key);
  e = *at;
  if (!e) {
    e = calloc(1, sizeof *e);
    if (e) e->key = copy_text(key);
    if (!e || !e->key) {
      pthread_mutex_unlock(&lock);
      if (e) free(e);
      free(value);
      return fail_with(error, KVC_ERR_OUT_OF_MEMORY, "out of memory");
    }
    *at = e;
  }
  free(e->value);
  e->value = value;
  e->size = size;
  pthread_mutex_unlock(&lock);
  return KVC_OK;
}

static int32_t store_get(void *opaque, const char *key, kvc_store_reserve_fn reserve,
                         void *reserve_data, kvc_plugin_error *error) {
  instance *self = opaque;
  entry *e;
  void *out;
  pthread_mutex_lock(&lock);
  if (injected(self, OP_GET)) {
    pthread_mutex_unlock(&lock);
    return fail_with(error, KVC_ERR_IO, "injected get failure");
  }
  e = *find(self->space, key);
  if (!e) {
    pthread_mutex_unlock(&lock);
    return fail_with(error, KVC_ERR_NOT_FOUND, "no value under the key");
  }
  out = reserve(reserve_data, e->size);
  if (!out) {
    pthread_mutex_unlock(&lock);
    return fail_with(error, KVC_ERR_OUT_OF_MEMORY, "the host could not reserve the value");
  }
  if (e->size) memcpy(out, e->value, e->size);
  pthread_mutex_unlock(&lock);
  return KVC_OK;
}

static int32_t store_exists(void *opaque, const char *key, int32_t *out_exists,
                            kvc_plugin_error *error) {
  instance *self = opaque;
  pthread_mutex_lock(&lock);
  if (injected(self, OP_EXISTS)) {
    pthread_mutex_unlock(&lock);
    return fail_with(error, KVC_ERR_IO, "injected exists failure");
  }
  *out_exists = *find(self->space, key) != NULL;
  pthread_mutex_unlock(&lock);
  return KVC_OK;
}

static int32_t store_remove(void *opaque, const char *key, kvc_plugin_error *error) {
  instance *self = opaque;
  entry **at, *e;
  pthread_mutex_lock(&lock);
  if (injected(self, OP_REMOVE)) {
    pthread_mutex_unlock(&lock);
    return fail_with(error, KVC_ERR_IO, "injected remove failure");
  }
  at = find(self->space, key);
  e = *at;
  if (!e) {
    pthread_mutex_unlock(&lock);
    return fail_with(error, KVC_ERR_NOT_FOUND, "no value under the key");
  }
  *at = e->next;
  pthread_mutex_unlock(&lock);
  free(e->key);
  free(e->value);
  free(e);
  return KVC_OK;
}

static const kvc_store_vtable vtable = {TEST_STORE_VARIANT == 3
                                            ? offsetof(kvc_store_vtable, remove)
                                            : sizeof(kvc_store_vtable),
                                        store_create,
                                        store_destroy,
                                        store_put,
                                        store_get,
                                        TEST_STORE_VARIANT == 2 ? NULL : store_exists,
                                        store_remove};

static const kvc_plugin_descriptor descriptor = {
    sizeof(kvc_plugin_descriptor),
    (KVC_PLUGIN_ABI_MAJOR << 16) | (TEST_STORE_VARIANT == 1 ? 1 : KVC_PLUGIN_ABI_MINOR),
    KVC_PLUGIN_STORE,
    TEST_STORE_VARIANT == 0   ? "test_store"
    : TEST_STORE_VARIANT == 1 ? "old_abi_store"
    : TEST_STORE_VARIANT == 2 ? "no_exists_store"
                              : "short_store",
    1,
    &vtable};

KVC_PLUGIN_EXPORT int32_t kvc_plugin_entry(const kvc_host_api *host,
                                           const kvc_plugin_descriptor **out_descriptors,
                                           size_t *out_count, kvc_plugin_error *error) {
  (void)host;
  (void)error;
  *out_descriptors = &descriptor;
  *out_count = 1;
  return KVC_OK;
}
