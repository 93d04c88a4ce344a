#include "cpu_forward.h"

#include <dlfcn.h>
#include <stdio.h>
#include <string.h>

void kvc_test_set_error(kvc_plugin_error *error, const char *message) {
  size_t n = strlen(message);
  if (!error) return;
  if (n >= sizeof error->message) n = sizeof error->message - 1;
  memcpy(error->message, message, n);
  error->message[n] = '\0';
}

static void fail_as(kvc_plugin_error *error, const char *who, const char *problem) {
  char message[256];
  snprintf(message, sizeof message, "%s: %s", who, problem);
  kvc_test_set_error(error, message);
}

const kvc_backend_vtable *kvc_test_cpu_backend(const kvc_host_api *host, const char *who,
                                               kvc_plugin_error *error) {
  static const kvc_backend_vtable *cpu;
  void *library;
  kvc_plugin_entry_fn entry;
  const kvc_plugin_descriptor *descriptors = NULL;
  size_t count = 0, i;
  if (cpu) return cpu;
  library = dlopen(KVC_CPU_BACKEND_PATH, RTLD_NOW | RTLD_LOCAL);
  if (!library) {
    fail_as(error, who, "cannot load the cpu backend");
    return NULL;
  }
  *(void **)(&entry) = dlsym(library, KVC_PLUGIN_ENTRY_SYMBOL);
  if (!entry) {
    fail_as(error, who, "the cpu backend has no entry point");
    return NULL;
  }
  if (entry(host, &descriptors, &count, error) != KVC_OK) return NULL;
  for (i = 0; i < count; ++i) {
    const kvc_plugin_descriptor *d = KVC_PLUGIN_AT(const kvc_plugin_descriptor, descriptors, i);
    if (d->kind == KVC_PLUGIN_BACKEND && strcmp(d->name, "cpu") == 0) {
      cpu = (const kvc_backend_vtable *)d->vtable;
      return cpu;
    }
  }
  fail_as(error, who, "no cpu backend descriptor");
  return NULL;
}
