#include "resident_tables.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* A resident table: the segments' pointers of one version. */
typedef struct table {
  uint64_t id;
  uint64_t version;
  int32_t n_segments;
  const void **pointers; /* [n_segments * 3]: k, v, pos of each */
} table;

/* Open addressing by id; emptied when full, as a bounded device cache would forget. */
#define TABLE_SLOTS 4096

struct kvc_test_tables {
  pthread_mutex_t mutex;
  table slots[TABLE_SLOTS];
  size_t used;
  long uploads;
  long reuses;
};

kvc_test_tables *kvc_test_tables_create(void) {
  kvc_test_tables *tables = (kvc_test_tables *)calloc(1, sizeof *tables);
  if (tables) pthread_mutex_init(&tables->mutex, NULL);
  return tables;
}

static void forget_all(kvc_test_tables *tables) {
  size_t i;
  for (i = 0; i < TABLE_SLOTS; ++i) free(tables->slots[i].pointers);
  memset(tables->slots, 0, sizeof tables->slots);
  tables->used = 0;
}

void kvc_test_tables_destroy(kvc_test_tables *tables) {
  if (!tables) return;
  forget_all(tables);
  pthread_mutex_destroy(&tables->mutex);
  free(tables);
}

static table *slot_of(kvc_test_tables *tables, uint64_t id) {
  size_t i = (size_t)(id * 0x9E3779B97F4A7C15ull) % TABLE_SLOTS;
  while (tables->slots[i].id != 0 && tables->slots[i].id != id) i = (i + 1) % TABLE_SLOTS;
  return &tables->slots[i];
}

static int same_segments(const table *t, const kvc_attend_job *job) {
  int32_t s;
  if (t->n_segments != job->n_segments) return 0;
  for (s = 0; s < job->n_segments; ++s) {
    const kvc_segment *seg = KVC_PLUGIN_AT(const kvc_segment, job->segments, s);
    if (t->pointers[3 * s] != seg->k || t->pointers[3 * s + 1] != seg->v ||
        t->pointers[3 * s + 2] != (const void *)seg->pos)
      return 0;
  }
  return 1;
}

/* 0 when out of memory. */
static int keep(table *t, const kvc_attend_job *job) {
  int32_t s;
  const void **pointers = (const void **)malloc(sizeof *pointers * 3 * (size_t)(job->n_segments + 1));
  if (!pointers) return 0;
  for (s = 0; s < job->n_segments; ++s) {
    const kvc_segment *seg = KVC_PLUGIN_AT(const kvc_segment, job->segments, s);
    pointers[3 * s] = seg->k;
    pointers[3 * s + 1] = seg->v;
    pointers[3 * s + 2] = seg->pos;
  }
  free(t->pointers);
  t->pointers = pointers;
  t->id = job->table_id;
  t->version = job->table_version;
  t->n_segments = job->n_segments;
  return 1;
}

static int32_t check_job(kvc_test_tables *tables, const kvc_attend_job *job, size_t j,
                         kvc_plugin_error *error) {
  table *t;
  int32_t s;
  for (s = 1; s + 1 < job->n_segments; ++s) {
    const kvc_segment *first = KVC_PLUGIN_AT(const kvc_segment, job->segments, 0);
    const kvc_segment *seg = KVC_PLUGIN_AT(const kvc_segment, job->segments, s);
    if (seg->count != first->count) {
      snprintf(error->message, sizeof error->message,
               "resident tables: attend job %zu: segment %d holds %d tokens, the first %d", j,
               (int)s, (int)seg->count, (int)first->count);
      return KVC_ERR_INTERNAL;
    }
  }
  if (job->n_segments > 1) {
    const kvc_segment *first = KVC_PLUGIN_AT(const kvc_segment, job->segments, 0);
    const kvc_segment *last = KVC_PLUGIN_AT(const kvc_segment, job->segments, job->n_segments - 1);
    if (last->count > first->count) {
      snprintf(error->message, sizeof error->message,
               "resident tables: attend job %zu: the last segment holds %d tokens, the first %d",
               j, (int)last->count, (int)first->count);
      return KVC_ERR_INTERNAL;
    }
  }
  t = slot_of(tables, job->table_id);
  if (t->id == job->table_id && t->version == job->table_version) {
    if (!same_segments(t, job)) {
      snprintf(error->message, sizeof error->message,
               "resident tables: attend job %zu: table %llu kept version %llu but its segments "
               "changed", j, (unsigned long long)job->table_id,
               (unsigned long long)job->table_version);
      return KVC_ERR_INTERNAL;
    }
    ++tables->reuses;
    return KVC_OK;
  }
  if (t->id == 0) {
    if (tables->used + 1 > TABLE_SLOTS / 2) {
      forget_all(tables);
      t = slot_of(tables, job->table_id);
    }
    ++tables->used;
  }
  if (!keep(t, job)) return KVC_ERR_OUT_OF_MEMORY;
  ++tables->uploads;
  return KVC_OK;
}

int32_t kvc_test_tables_check(kvc_test_tables *tables, const kvc_attend_call *call,
                              kvc_plugin_error *error) {
  int32_t code = KVC_OK;
  size_t j;
  pthread_mutex_lock(&tables->mutex);
  for (j = 0; j < call->n_jobs && code == KVC_OK; ++j) {
    const kvc_attend_job *job = KVC_PLUGIN_AT(const kvc_attend_job, call->jobs, j);
    if (!KVC_PLUGIN_HAS_FIELD(job, kvc_attend_job, table_version) || job->table_id == 0)
      continue;
    code = check_job(tables, job, j, error);
  }
  pthread_mutex_unlock(&tables->mutex);
  return code;
}

void kvc_test_tables_counts(kvc_test_tables *tables, long *uploads, long *reuses) {
  pthread_mutex_lock(&tables->mutex);
  *uploads = tables->uploads;
  *reuses = tables->reuses;
  pthread_mutex_unlock(&tables->mutex);
}
