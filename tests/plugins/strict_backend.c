/* A backend that runs the CPU backend's kernels (loaded from KVC_CPU_BACKEND_PATH) over memory
 * the host cannot touch outside the backend's own calls, as it cannot touch a GPU's: every
 * allocation comes from one mmap'd arena per instance that is PROT_NONE except while a call of
 * this backend runs. A read of stored K/V, positions or statistics by the core, a test or a
 * tool other than through the backend then faults here (the fault handler names the arena
 * before the previous handler, a sanitizer's say, reports the crash), where on a GPU it would
 * read device memory from the host.
 *
 * Calls may overlap (different caches, or sequences of one cache on several threads): the
 * arena is readable while at least one call runs, so only a host read made while no call of
 * the instance is running is caught for certain. */
#define _GNU_SOURCE
#include <pthread.h>
#include <signal.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "cpu_forward.h"
#include "kvcache/kvcache_plugin.h"
#include "resident_tables.h"

/* Address space reserved per instance; pages are only backed once a call writes them. */
#define ARENA_BYTES ((size_t)16 << 30)
/* The arena asks for transparent huge pages, and its protection changes cover whole ones:
 * mprotect then updates one entry per 2 MiB instead of one per page, on every call. */
#define HUGE_PAGE ((size_t)2 << 20)

/* A run of pages of the arena, [first, first + count). */
typedef struct extent {
  size_t first;
  size_t count;
} extent;

/* A sorted array of extents. */
typedef struct extent_list {
  extent *items;
  size_t size;
  size_t capacity;
} extent_list;

typedef struct strict_instance {
  void *inner;
  unsigned char *arena;    /* HUGE_PAGE-aligned */
  unsigned char *mapping;  /* what mmap returned: ARENA_BYTES + HUGE_PAGE */
  size_t page;
  size_t used_pages;  /* pages ever handed out: the arena's low end, the only part protected */
  extent_list free;   /* below used_pages, by first page */
  extent_list live;   /* allocations, by first page */
  long active_calls;  /* while > 0 the used pages are readable and writable */
  pthread_mutex_t mutex;
  kvc_test_tables *tables; /* what a GPU backend keeping tables resident would rely on */
} strict_instance;

static const kvc_backend_vtable *cpu;

static strict_instance *self(void *instance) { return (strict_instance *)instance; }

/* ------------------------------------------------------------------ extent lists */

/* The index of the first extent starting at or after `first`. */
static size_t lower_bound(const extent_list *list, size_t first) {
  size_t lo = 0, hi = list->size;
  while (lo < hi) {
    size_t mid = lo + (hi - lo) / 2;
    if (list->items[mid].first < first) lo = mid + 1;
    else hi = mid;
  }
  return lo;
}

static int insert_at(extent_list *list, size_t index, extent e) {
  if (list->size == list->capacity) {
    size_t capacity = list->capacity ? 2 * list->capacity : 64;
    extent *items = (extent *)realloc(list->items, capacity * sizeof *items);
    if (!items) return 0;
    list->items = items;
    list->capacity = capacity;
  }
  memmove(list->items + index + 1, list->items + index, (list->size - index) * sizeof *list->items);
  list->items[index] = e;
  ++list->size;
  return 1;
}

static void erase_at(extent_list *list, size_t index) {
  memmove(list->items + index, list->items + index + 1,
          (list->size - index - 1) * sizeof *list->items);
  --list->size;
}

/* ------------------------------------------------------------------ protection */

static void set_access(strict_instance *s, size_t first, size_t count, int readable) {
  const size_t begin = first * s->page / HUGE_PAGE * HUGE_PAGE;
  const size_t end = ((first + count) * s->page + HUGE_PAGE - 1) / HUGE_PAGE * HUGE_PAGE;
  if (count == 0) return;
  if (mprotect(s->arena + begin, end - begin,
               readable ? PROT_READ | PROT_WRITE : PROT_NONE) != 0) {
    abort();
  }
}

static void enter(strict_instance *s) {
  pthread_mutex_lock(&s->mutex);
  if (s->active_calls++ == 0) set_access(s, 0, s->used_pages, 1);
  pthread_mutex_unlock(&s->mutex);
}

static void leave(strict_instance *s) {
  pthread_mutex_lock(&s->mutex);
  if (--s->active_calls == 0) set_access(s, 0, s->used_pages, 0);
  pthread_mutex_unlock(&s->mutex);
}

/* A fault in the span of the arenas is named on stderr, then the previous handler reports it. */
static struct sigaction previous_segv;
static unsigned char *volatile arenas_low = (unsigned char *)UINTPTR_MAX;
static unsigned char *volatile arenas_high;

static void on_segv(int signal, siginfo_t *info, void *context) {
  static const char message[] =
      "strict backend: a fault in its memory: the host touched backend memory outside a "
      "backend call\n";
  unsigned char *address = (unsigned char *)info->si_addr;
  (void)signal;
  (void)context;
  if (address >= arenas_low && address < arenas_high) {
    ssize_t ignored = write(STDERR_FILENO, message, sizeof message - 1);
    (void)ignored;
  }
  /* Returning re-runs the faulting access under the previous handler. */
  sigaction(SIGSEGV, &previous_segv, NULL);
}

static void note_arena(unsigned char *arena) {
  static pthread_mutex_t mutex = PTHREAD_MUTEX_INITIALIZER;
  static int installed;
  pthread_mutex_lock(&mutex);
  if (arena < arenas_low) arenas_low = arena;
  if (arena + ARENA_BYTES > arenas_high) arenas_high = arena + ARENA_BYTES;
  if (!installed) {
    struct sigaction action;
    memset(&action, 0, sizeof action);
    action.sa_sigaction = on_segv;
    action.sa_flags = SA_SIGINFO | SA_NODEFER;
    sigemptyset(&action.sa_mask);
    installed = sigaction(SIGSEGV, &action, &previous_segv) == 0;
  }
  pthread_mutex_unlock(&mutex);
}

/* ------------------------------------------------------------------ the vtable */

static int32_t strict_create(const kvc_host_api *host, void **out_instance,
                             kvc_plugin_error *error) {
  static pthread_mutex_t loading = PTHREAD_MUTEX_INITIALIZER;
  strict_instance *s;
  int32_t code;
  pthread_mutex_lock(&loading);  /* caches may be created on several threads */
  if (!cpu) cpu = kvc_test_cpu_backend(host, "strict backend", error);
  pthread_mutex_unlock(&loading);
  if (!cpu) return KVC_ERR_PLUGIN;
  s = (strict_instance *)calloc(1, sizeof *s);
  if (!s) return KVC_ERR_OUT_OF_MEMORY;
  s->page = (size_t)sysconf(_SC_PAGESIZE);
  s->mapping = (unsigned char *)mmap(NULL, ARENA_BYTES + HUGE_PAGE, PROT_NONE,
                                     MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
  if (s->mapping == MAP_FAILED) {
    free(s);
    kvc_test_set_error(error, "strict backend: cannot reserve its arena");
    return KVC_ERR_OUT_OF_MEMORY;
  }
  s->arena = s->mapping + (HUGE_PAGE - (uintptr_t)s->mapping % HUGE_PAGE) % HUGE_PAGE;
  madvise(s->arena, ARENA_BYTES, MADV_HUGEPAGE); /* a hint: without it, only slower */
  s->tables = kvc_test_tables_create();
  code = s->tables ? cpu->create(host, &s->inner, error) : KVC_ERR_OUT_OF_MEMORY;
  if (code != KVC_OK) {
    kvc_test_tables_destroy(s->tables);
    munmap(s->mapping, ARENA_BYTES + HUGE_PAGE);
    free(s);
    return code;
  }
  pthread_mutex_init(&s->mutex, NULL);
  note_arena(s->arena);
  *out_instance = s;
  return KVC_OK;
}

static void strict_destroy(void *instance) {
  strict_instance *s = self(instance);
  cpu->destroy(s->inner);
  kvc_test_tables_destroy(s->tables);
  munmap(s->mapping, ARENA_BYTES + HUGE_PAGE);
  pthread_mutex_destroy(&s->mutex);
  free(s->free.items);
  free(s->live.items);
  free(s);
}

static void *strict_alloc(void *instance, size_t bytes) {
  strict_instance *s = self(instance);
  size_t pages = (bytes ? bytes : 1) / s->page + ((bytes ? bytes : 1) % s->page != 0);
  size_t i, first = SIZE_MAX;
  void *result = NULL;
  pthread_mutex_lock(&s->mutex);
  for (i = 0; i < s->free.size; ++i) {
    if (s->free.items[i].count < pages) continue;
    first = s->free.items[i].first;
    break;
  }
  if (first == SIZE_MAX && pages <= ARENA_BYTES / s->page - s->used_pages) {
    first = s->used_pages;
    i = s->free.size;
  }
  if (first != SIZE_MAX) {
    extent e = {first, pages};
    if (insert_at(&s->live, lower_bound(&s->live, first), e)) {
      if (i < s->free.size) {
        s->free.items[i].first += pages;
        s->free.items[i].count -= pages;
        if (s->free.items[i].count == 0) erase_at(&s->free, i);
      } else {
        s->used_pages += pages;
        if (s->active_calls > 0) set_access(s, first, pages, 1);
      }
      result = s->arena + first * s->page;
    }
  }
  pthread_mutex_unlock(&s->mutex);
  return result;
}

static void strict_free(void *instance, void *ptr) {
  strict_instance *s = self(instance);
  size_t first, at, count;
  if (!ptr) return;
  first = (size_t)((unsigned char *)ptr - s->arena) / s->page;
  pthread_mutex_lock(&s->mutex);
  at = lower_bound(&s->live, first);
  if (at == s->live.size || s->live.items[at].first != first) abort(); /* not ours */
  count = s->live.items[at].count;
  erase_at(&s->live, at);
  /* Back to the free list, merged with its neighbours. */
  at = lower_bound(&s->free, first);
  if (at > 0 && s->free.items[at - 1].first + s->free.items[at - 1].count == first) {
    --at;
    s->free.items[at].count += count;
  } else {
    extent e = {first, count};
    if (!insert_at(&s->free, at, e)) abort();
  }
  if (at + 1 < s->free.size &&
      s->free.items[at].first + s->free.items[at].count == s->free.items[at + 1].first) {
    s->free.items[at].count += s->free.items[at + 1].count;
    erase_at(&s->free, at + 1);
  }
  pthread_mutex_unlock(&s->mutex);
}

static int32_t strict_copy(void *instance, void *dst, const void *src, size_t bytes,
                           kvc_copy_kind kind, kvc_plugin_error *error) {
  int32_t code;
  enter(self(instance));
  code = cpu->copy(self(instance)->inner, dst, src, bytes, kind, error);
  leave(self(instance));
  return code;
}

/* The calls with a call struct: each runs with the arena open. */
#define STRICT_CALL(entry, call_type)                                                      \
  static int32_t strict_##entry(void *instance, const call_type *call,                     \
                                kvc_plugin_error *error) {                                 \
    int32_t code;                                                                          \
    enter(self(instance));                                                                 \
    code = cpu->entry(self(instance)->inner, call, error);                                 \
    leave(self(instance));                                                                 \
    return code;                                                                           \
  }
STRICT_CALL(append, kvc_append_call)
STRICT_CALL(append_tensors, kvc_append_tensors_call)
STRICT_CALL(compact, kvc_compact_call)
STRICT_CALL(read_keys, kvc_read_keys_call)
STRICT_CALL(read_tokens, kvc_read_tokens_call)

/* The host's segment tables are checked as a backend keeping them resident would use them. */
static int32_t strict_attend(void *instance, const kvc_attend_call *call,
                             kvc_plugin_error *error) {
  int32_t code = kvc_test_tables_check(self(instance)->tables, call, error);
  if (code != KVC_OK) return code;
  enter(self(instance));
  code = cpu->attend(self(instance)->inner, call, error);
  leave(self(instance));
  return code;
}
static const kvc_backend_vtable strict_vtable = {
    sizeof(kvc_backend_vtable), strict_create,  strict_destroy, strict_alloc,
    strict_free,                strict_copy,    strict_append,  strict_attend,
    strict_compact,             strict_read_keys, strict_read_tokens,
    /* No 1.3 entries: made by create; its copies go through copy, which returns when done. */
    NULL,                       NULL,           NULL,           NULL,
    strict_append_tensors,      NULL};

static const kvc_plugin_descriptor strict_descriptor = {
    sizeof(kvc_plugin_descriptor), KVC_PLUGIN_ABI_VERSION, KVC_PLUGIN_BACKEND, "strict", 1,
    &strict_vtable};

KVC_PLUGIN_EXPORT int32_t kvc_plugin_entry(const kvc_host_api *host,
                                           const kvc_plugin_descriptor **out_descriptors,
                                           size_t *out_count, kvc_plugin_error *error) {
  (void)host;
  (void)error;
  *out_descriptors = &strict_descriptor;
  *out_count = 1;
  return KVC_OK;
}
