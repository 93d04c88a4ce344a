package kvcache

// #include <kvcache/kvcache.h>
//
// /* A kvc_batch or kvc_tensor holds pointers, so one built in Go memory around Go slices
//    would be Go memory holding Go pointers, which cgo forbids passing to C. These helpers
//    take the slices as plain arguments and build the structs on the C stack. */
// static kvc_tensor go_kvc_in(const void *data, kvc_dtype dtype) {
//   kvc_tensor t = {data, dtype, KVC_DEVICE_HOST, 0};
//   return t;
// }
//
// static kvc_status *go_kvc_append(kvc_cache *cache, int32_t layer, int32_t n_seqs,
//                                  const int32_t *seq_ids, const int32_t *n_tokens,
//                                  const int32_t *positions, const int32_t *prompt_end,
//                                  const void *k, kvc_dtype k_dtype, const void *v,
//                                  kvc_dtype v_dtype) {
//   kvc_batch batch;
//   kvc_tensor tk = go_kvc_in(k, k_dtype), tv = go_kvc_in(v, v_dtype);
//   kvc_batch_init(&batch, n_seqs, seq_ids, n_tokens, positions);
//   batch.prompt_end = prompt_end;
//   return kvc_append(cache, layer, &batch, &tk, &tv);
// }
//
// static kvc_status *go_kvc_attend(kvc_cache *cache, int32_t layer, int32_t n_seqs,
//                                  const int32_t *seq_ids, const int32_t *n_tokens,
//                                  const int32_t *positions, const int32_t *prompt_end,
//                                  const void *q, kvc_dtype q_dtype,
//                                  const kvc_attention_params *params, float *out) {
//   kvc_batch batch;
//   kvc_tensor tq = go_kvc_in(q, q_dtype);
//   kvc_tensor_mut tout = {out, KVC_DTYPE_F32, KVC_DEVICE_HOST, 0};
//   kvc_batch_init(&batch, n_seqs, seq_ids, n_tokens, positions);
//   batch.prompt_end = prompt_end;
//   return kvc_attend(cache, layer, &batch, &tq, params, &tout);
// }
//
// static kvc_status *go_kvc_append_attend(kvc_cache *cache, int32_t layer, int32_t n_seqs,
//                                         const int32_t *seq_ids, const int32_t *n_tokens,
//                                         const int32_t *positions, const int32_t *prompt_end,
//                                         const void *q, kvc_dtype q_dtype, const void *k,
//                                         kvc_dtype k_dtype, const void *v, kvc_dtype v_dtype,
//                                         const kvc_attention_params *params, float *out) {
//   kvc_batch batch;
//   kvc_tensor tq = go_kvc_in(q, q_dtype), tk = go_kvc_in(k, k_dtype), tv = go_kvc_in(v, v_dtype);
//   kvc_tensor_mut tout = {out, KVC_DTYPE_F32, KVC_DEVICE_HOST, 0};
//   kvc_batch_init(&batch, n_seqs, seq_ids, n_tokens, positions);
//   batch.prompt_end = prompt_end;
//   return kvc_append_attend(cache, layer, &batch, &tq, &tk, &tv, params, &tout);
// }
import "C"

import (
	"fmt"
	"unsafe"
)

// Tensor is a dense row-major [tokens, heads, head_dim] input, read during the call only.
type Tensor struct {
	f32   []float32
	bits  []uint16
	dtype DType
}

// F32Tensor wraps float32 elements.
func F32Tensor(data []float32) Tensor { return Tensor{f32: data, dtype: F32} }

// F16Tensor wraps IEEE half-precision bit patterns; the cache stores F16 or a quantized format.
func F16Tensor(bits []uint16) Tensor { return Tensor{bits: bits, dtype: F16} }

// BF16Tensor wraps bfloat16 bit patterns; the cache stores BF16 or a quantized format.
func BF16Tensor(bits []uint16) Tensor { return Tensor{bits: bits, dtype: BF16} }

func (t Tensor) len() int {
	if t.dtype == F32 {
		return len(t.f32)
	}
	return len(t.bits)
}

// ptr is the first element's address; call it only after checking that len() > 0.
func (t Tensor) ptr() unsafe.Pointer {
	if t.dtype == F32 {
		return unsafe.Pointer(&t.f32[0])
	}
	return unsafe.Pointer(&t.bits[0])
}

// AttentionParams are the attention options; the zero value is the library's default
// (scale 1/sqrt(head_dim), no sliding window, no soft-cap).
type AttentionParams struct {
	Scale         float32 // 0 means 1/sqrt(head_dim)
	SlidingWindow int32   // > 0: a query at p sees keys at positions (p - window, p]
	Softcap       float32 // > 0: logits become softcap * tanh(logit / softcap)
}

// Append stores the new tokens' K and V ([total, kv_heads, head_dim]) of layer layer.
// Past the memory limit it fails with ErrOutOfMemory and stores nothing.
func (cache *Cache) Append(layer int32, b Batch, k, v Tensor) error {
	const op = "kvc_append"
	return cache.shared(func() error {
		total, err := b.check(op)
		if err == nil {
			err = cache.checkTensors(op, total, nil, &k, &v, nil)
		}
		if err != nil {
			return err
		}
		return statusError(op, C.go_kvc_append(cache.c, C.int32_t(layer), C.int32_t(len(b.SeqIDs)),
			int32s(b.SeqIDs), int32s(b.NTokens), int32s(b.Positions), b.promptEnd(),
			k.ptr(), C.kvc_dtype(k.dtype), v.ptr(), C.kvc_dtype(v.dtype)))
	})
}

// Attend writes to out ([total, q_heads, head_dim]) the attention of the queries q
// ([total, q_heads, head_dim]) over what the cache holds for each sequence on layer layer,
// causal by position, with grouped-query heads. Append the new tokens first, or use
// AppendAttend.
func (cache *Cache) Attend(layer int32, b Batch, q Tensor, params AttentionParams, out []float32) error {
	const op = "kvc_attend"
	return cache.shared(func() error {
		total, err := b.check(op)
		if err == nil {
			err = cache.checkTensors(op, total, &q, nil, nil, out)
		}
		if err != nil {
			return err
		}
		attn := params.toC()
		return statusError(op, C.go_kvc_attend(cache.c, C.int32_t(layer), C.int32_t(len(b.SeqIDs)),
			int32s(b.SeqIDs), int32s(b.NTokens), int32s(b.Positions), b.promptEnd(),
			q.ptr(), C.kvc_dtype(q.dtype), &attn, (*C.float)(unsafe.Pointer(&out[0]))))
	})
}

// AppendAttend is Append then Attend in one call; on error nothing is stored.
func (cache *Cache) AppendAttend(layer int32, b Batch, q, k, v Tensor, params AttentionParams, out []float32) error {
	const op = "kvc_append_attend"
	return cache.shared(func() error {
		total, err := b.check(op)
		if err == nil {
			err = cache.checkTensors(op, total, &q, &k, &v, out)
		}
		if err != nil {
			return err
		}
		attn := params.toC()
		return statusError(op, C.go_kvc_append_attend(cache.c, C.int32_t(layer), C.int32_t(len(b.SeqIDs)),
			int32s(b.SeqIDs), int32s(b.NTokens), int32s(b.Positions), b.promptEnd(),
			q.ptr(), C.kvc_dtype(q.dtype), k.ptr(), C.kvc_dtype(k.dtype), v.ptr(), C.kvc_dtype(v.dtype),
			&attn, (*C.float)(unsafe.Pointer(&out[0]))))
	})
}

func (p AttentionParams) toC() C.kvc_attention_params {
	var c C.kvc_attention_params
	C.kvc_attention_params_init_sized(&c, C.sizeof_kvc_attention_params)
	c.scale = C.float(p.Scale)
	c.sliding_window = C.int32_t(p.SlidingWindow)
	c.softcap = C.float(p.Softcap)
	return c
}

// checkTensors checks the length of each given tensor against the shape it must have.
func (cache *Cache) checkTensors(op string, total int, q, k, v *Tensor, out []float32) error {
	s := cache.shape
	want := func(name string, have int, heads int32) error {
		if need := total * int(heads) * int(s.HeadDim); have != need {
			return invalid(op, fmt.Sprintf("%s holds %d elements; [%d tokens, %d heads, %d head_dim] needs %d",
				name, have, total, heads, s.HeadDim, need))
		}
		return nil
	}
	var errs []error
	if q != nil {
		errs = append(errs, want("q", q.len(), s.QHeads), want("out", len(out), s.QHeads))
	}
	if k != nil {
		errs = append(errs, want("k", k.len(), s.KVHeads), want("v", v.len(), s.KVHeads))
	}
	for _, err := range errs {
		if err != nil {
			return err
		}
	}
	return nil
}

// int32s is the address of s's first element as C sees it; s must not be empty.
func int32s(s []int32) *C.int32_t { return (*C.int32_t)(unsafe.Pointer(&s[0])) }
