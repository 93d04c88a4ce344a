/* What a device backend that keeps each head's segment table resident between attend calls
 * relies on (kvcache_plugin.h, "Resident segment tables"), checked on every call: the test
 * backends that forward to the CPU backend run it, so every suite on them fails at the first
 * table the host changed without a new version. */
#ifndef KVC_TEST_RESIDENT_TABLES_H
#define KVC_TEST_RESIDENT_TABLES_H

#include "kvcache/kvcache_plugin.h"

typedef struct kvc_test_tables kvc_test_tables;

/* NULL when out of memory. Safe to use from several threads at once. */
kvc_test_tables *kvc_test_tables_create(void);
void kvc_test_tables_destroy(kvc_test_tables *tables);

/* Checks each job of an attend call that gives a table id: a (table_id, table_version) seen
 * before lists the same segments as then (counts aside), every segment but the last holds as
 * many tokens as the first, and the last at most as many. Keeps the table of each new version, as an upload would.
 * KVC_ERR_INTERNAL with a message naming the job when one fails. */
int32_t kvc_test_tables_check(kvc_test_tables *tables, const kvc_attend_call *call,
                              kvc_plugin_error *error);

/* Tables kept anew (a new id or version: an upload) and reused so far. */
void kvc_test_tables_counts(kvc_test_tables *tables, long *uploads, long *reuses);

#endif
