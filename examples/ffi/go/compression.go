package kvcache

// #include <kvcache/kvcache.h>
import "C"

import (
	"context"
	"unsafe"
)

// AllLayers, as Compress's layer, compresses every layer.
const AllLayers int32 = -1

// Compress compresses the listed sequences now on layer (or AllLayers): every (layer, KV
// head) over its budget keeps its sinks, its recent tokens and its best-scored tokens up to
// the budget. A cache without a policy does nothing.
func (cache *Cache) Compress(layer int32, seqIDs ...int32) error {
	return cache.CompressCtx(context.Background(), layer, seqIDs...)
}

// CompressCtx is Compress unless ctx is done before the compression starts (ctx.Err() is
// then returned); a compression that has started runs to its end.
func (cache *Cache) CompressCtx(ctx context.Context, layer int32, seqIDs ...int32) error {
	return cache.sharedCtx(ctx, func() error {
		var ids *C.int32_t
		if len(seqIDs) > 0 {
			ids = int32s(seqIDs)
		}
		return statusError("kvc_compress", C.kvc_compress(cache.c, C.int32_t(layer), C.int32_t(len(seqIDs)), ids))
	})
}

// StatKind is an attention statistic an engine computed itself.
type StatKind int32

// The statistics ReportStats accepts.
const (
	StatAttnSum    StatKind = C.KVC_STAT_KIND_ATTN_SUM    // added to the accumulated attention mass (H2O)
	StatAttnLast   StatKind = C.KVC_STAT_KIND_ATTN_LAST   // replaces the last query's attention (TOVA)
	StatAttnWindow StatKind = C.KVC_STAT_KIND_ATTN_WINDOW // replaces the observation window's attention (SnapKV)
)

// ReportStats reports one statistic per stored token of (sequence, layer, KV head), in
// storage order, for engines that compute attention with their own kernels.
func (cache *Cache) ReportStats(id, layer, kvHead int32, kind StatKind, values []float32) error {
	return cache.shared(func() error {
		var p *C.float
		if len(values) > 0 {
			p = (*C.float)(unsafe.Pointer(&values[0]))
		}
		return statusError("kvc_report_stats", C.kvc_report_stats(cache.c, C.int32_t(id), C.int32_t(layer),
			C.int32_t(kvHead), C.kvc_stat_kind(kind), p, C.int32_t(len(values))))
	})
}

// PolicyInfo is kvc_policy_info: the cache's policy as in effect.
type PolicyInfo struct {
	Name              string
	Sinks, Recent     int32
	BudgetTokens      int32   // 0: BudgetRatio applies
	BudgetRatio       float64 // 0 with BudgetTokens
	Stats             uint32  // the kvc_stat_flags bits the policy reads
	ObservationWindow int32
}

// PolicyInfo describes the cache's policy; ErrNotFound for a cache without one.
func (cache *Cache) PolicyInfo() (PolicyInfo, error) {
	var info PolicyInfo
	err := cache.shared(func() error {
		var c C.kvc_policy_info
		C.kvc_policy_info_init_sized(&c, C.sizeof_kvc_policy_info)
		if err := statusError("kvc_cache_policy_info", C.kvc_cache_policy_info(cache.c, &c)); err != nil {
			return err
		}
		info = PolicyInfo{
			Name:              C.GoString(c.name), // owned by the cache: copied under the lock
			Sinks:             int32(c.sinks),
			Recent:            int32(c.recent),
			BudgetTokens:      int32(c.budget_tokens),
			BudgetRatio:       float64(c.budget_ratio),
			Stats:             uint32(c.stats),
			ObservationWindow: int32(c.observation_window),
		}
		return nil
	})
	return info, err
}

// EstimatePeakBytes is the peak bytes one sequence holds when a prompt of promptTokens
// arrives in chunks of chunkTokens and newTokens are then decoded one at a time, under the
// cache's layout, policy, budget and triggers.
func (cache *Cache) EstimatePeakBytes(promptTokens, chunkTokens, newTokens int32) (uint64, error) {
	var n C.size_t
	err := cache.shared(func() error {
		return statusError("kvc_cache_estimate_peak_bytes", C.kvc_cache_estimate_peak_bytes(cache.c,
			C.int32_t(promptTokens), C.int32_t(chunkTokens), C.int32_t(newTokens), &n))
	})
	return uint64(n), err
}

// EstimateRequest is what Estimate models: a prompt of PromptTokens arriving in chunks of
// ChunkTokens (the last may be shorter), then NewTokens decoded one at a time.
// MarksPromptEnd says the engine marks the prompt's last chunk (Batch.PromptEnd).
type EstimateRequest struct {
	PromptTokens, ChunkTokens, NewTokens int32
	MarksPromptEnd                       bool
}

// Estimate is EstimatePeakBytes with the prompt's last chunk marked or not: with PrefillOnce
// and a marked chunk each layer is compressed right after it, so a prompt prefilled in one
// chunk needs about one layer holding the prompt and the others their budget.
func (cache *Cache) Estimate(r EstimateRequest) (uint64, error) {
	var c C.kvc_estimate_request
	C.kvc_estimate_request_init_sized(&c, C.sizeof_kvc_estimate_request, C.int32_t(r.PromptTokens), C.int32_t(r.ChunkTokens), C.int32_t(r.NewTokens))
	if r.MarksPromptEnd {
		c.marks_prompt_end = 1
	}
	var n C.size_t
	err := cache.shared(func() error {
		return statusError("kvc_cache_estimate", C.kvc_cache_estimate(cache.c, &c, &n))
	})
	return uint64(n), err
}
