/* For test backends that forward to the CPU backend plugin: loads it once from
 * KVC_CPU_BACKEND_PATH and finds its vtable through its own entry point. */
#ifndef KVC_TEST_CPU_FORWARD_H
#define KVC_TEST_CPU_FORWARD_H

#include "kvcache/kvcache_plugin.h"

/* Copies `message` into `error` (if any), cut to fit. */
void kvc_test_set_error(kvc_plugin_error *error, const char *message);

/* The CPU backend's vtable, or NULL with a message naming `who` in `error`. */
const kvc_backend_vtable *kvc_test_cpu_backend(const kvc_host_api *host, const char *who,
                                               kvc_plugin_error *error);

#endif
