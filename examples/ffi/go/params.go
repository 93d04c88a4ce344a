package kvcache

// #include <kvcache/kvcache.h>
// #include <kvcache/kvcache_format.h>
import "C"

import "unsafe"

// DType is a storage format of K and V, and an element type of passed tensors.
type DType int32

// The formats. Q8_0 and Q4_0 (groups of 32 values with an f16 scale, kvcache_format.h) are
// storage formats only: tensors passed to a cache of them are F32, F16 or BF16.
const (
	F32  DType = C.KVC_DTYPE_F32
	F16  DType = C.KVC_DTYPE_F16
	BF16 DType = C.KVC_DTYPE_BF16
	Q8_0 DType = C.KVC_DTYPE_Q8_0
	Q4_0 DType = C.KVC_DTYPE_Q4_0
)

func (d DType) String() string { return C.GoString(C.kvc_dtype_name(C.kvc_dtype(d))) }

// Size is the bytes per element; 0 for a value that is not a DType.
func (d DType) Size() int { return int(C.kvc_dtype_size(C.kvc_dtype(d))) }

// AsDType in CacheParams.KDType or VDType stores K or V as CacheParams.DType.
const AsDType DType = -1

// NotDemoted in CacheParams.DemoteKDType or DemoteVDType: K or V keeps the cache's format in
// the demoted tier.
const NotDemoted DType = -1

// FormatInfo is a storage format as the library's format table (kvcache_format.h)
// describes it.
type FormatInfo struct {
	Name       string // as in YAML
	GroupSize  uint32 // values sharing one scale; 1 for a format without scales
	GroupBytes uint32 // bytes of one group of values, its scale included
}

// RowBytes is the bytes of a row of values values (a multiple of GroupSize), scales included.
func (f FormatInfo) RowBytes(values int) int {
	return values / int(f.GroupSize) * int(f.GroupBytes)
}

// Describe reads the format table's entry for d (kvc_format_describe); an error for a value
// outside the table.
func (d DType) Describe() (FormatInfo, error) {
	info := C.kvc_format_info{struct_size: C.sizeof_kvc_format_info}
	if err := statusError("kvc_format_describe", C.kvc_format_describe(C.kvc_dtype(d), &info)); err != nil {
		return FormatInfo{}, err
	}
	return FormatInfo{
		Name:       C.GoString(info.name),
		GroupSize:  uint32(info.group_size),
		GroupBytes: uint32(info.group_bytes),
	}, nil
}

// Layout is a storage layout.
type Layout int32

// The storage layouts.
const (
	Paged      Layout = C.KVC_LAYOUT_PAGED
	Contiguous Layout = C.KVC_LAYOUT_CONTIGUOUS
)

// Rotation is a rotation the backend applies to K (kvc_rotation, kvcache_rotation.h): to each
// K row before it is stored and to each query at attention, so attention is unchanged up to
// rounding. Keys read back (View, Export, policies) are the rotated rows, of the same norms.
type Rotation int32

// The rotations of K.
const (
	RotationNone Rotation = C.KVC_ROTATION_NONE
	// RotationHadamard is a normalised Hadamard transform of each head row: it spreads outlier
	// channels, so 4-bit keys (Q4_0) lose less.
	RotationHadamard Rotation = C.KVC_ROTATION_HADAMARD
)

// PrefillCompression says when a cache compresses a prompt automatically.
type PrefillCompression int32

// The prefill compression modes.
const (
	PrefillNone     PrefillCompression = C.KVC_PREFILL_NONE
	PrefillPerChunk PrefillCompression = C.KVC_PREFILL_PER_CHUNK // Batch-Max
	PrefillOnce     PrefillCompression = C.KVC_PREFILL_ONCE
)

// KeyValue is a policy-specific parameter, its value written as in YAML.
type KeyValue struct{ Key, Value string }

// CacheParams is kvc_cache_params. Start from DefaultCacheParams: its zero value is not
// the library's defaults (Sinks and Recent default to -1, the policy's own default).
type CacheParams struct {
	Layers, KVHeads, QHeads, HeadDim int32
	DType                            DType
	Layout                           Layout
	BlockTokens                      int32
	GrowthFactor                     float64
	MemoryLimit                      uint64
	Backend                          string // "" means "cpu"
	Policy                           string // "" means no compression
	Budget                           int32
	BudgetRatio                      float64
	Sinks, Recent                    int32
	PolicyParams                     []KeyValue
	Prefill                          PrefillCompression
	DecodeEvery, DecodeSlack         int32
	KDType, VDType                   DType // the storage format of K or V alone; AsDType: DType
	KRotation                        Rotation
	PrefixCache                      bool   // publish and attach prompt prefixes (prefix.go); paged only
	PrefixStore                      string // with PrefixCache: a store AttachPrefix continues in; "": none
	PrefixWriteThrough               bool   // with PrefixStore: PublishPrefix also writes the blocks there
	// With a policy, "demote before evict" (paged only): compression stores the tokens the
	// budget cannot keep in the cache's formats with K and V in these smaller formats before
	// it evicts any. NotDemoted for both (the default): no demotion.
	DemoteKDType, DemoteVDType DType
	DemoteKeep                 float64 // with demotion: the share of each head's byte budget left to the cache's formats, in [0, 1]
}

// DefaultCacheParams returns the library's defaults (kvc_cache_params_init).
func DefaultCacheParams() CacheParams {
	var p C.kvc_cache_params
	C.kvc_cache_params_init_sized(&p, C.sizeof_kvc_cache_params)
	return paramsFromC(&p)
}

func paramsFromC(p *C.kvc_cache_params) CacheParams {
	return CacheParams{
		Layers:             int32(p.layers),
		KVHeads:            int32(p.kv_heads),
		QHeads:             int32(p.q_heads),
		HeadDim:            int32(p.head_dim),
		DType:              DType(p.dtype),
		Layout:             Layout(p.layout),
		BlockTokens:        int32(p.block_tokens),
		GrowthFactor:       float64(p.growth_factor),
		MemoryLimit:        uint64(p.memory_limit),
		Backend:            C.GoString(p.backend),
		Policy:             C.GoString(p.policy),
		Budget:             int32(p.budget),
		BudgetRatio:        float64(p.budget_ratio),
		Sinks:              int32(p.sinks),
		Recent:             int32(p.recent),
		Prefill:            PrefillCompression(p.prefill),
		DecodeEvery:        int32(p.decode_every),
		DecodeSlack:        int32(p.decode_slack),
		KDType:             DType(p.k_dtype),
		VDType:             DType(p.v_dtype),
		KRotation:          Rotation(p.k_rotation),
		PrefixCache:        p.prefix_cache != 0,
		PrefixStore:        C.GoString(p.prefix_store),
		PrefixWriteThrough: p.prefix_write_through != 0,
		DemoteKDType:       DType(p.demote_k_dtype),
		DemoteVDType:       DType(p.demote_v_dtype),
		DemoteKeep:         float64(p.demote_keep),
	}
}

// toC fills a kvc_cache_params whose strings and parameter array live in m. The struct
// itself may be Go memory: the pointers it holds are C pointers.
func (p *CacheParams) toC(m *cmem) C.kvc_cache_params {
	var c C.kvc_cache_params
	C.kvc_cache_params_init_sized(&c, C.sizeof_kvc_cache_params)
	c.layers = C.int32_t(p.Layers)
	c.kv_heads = C.int32_t(p.KVHeads)
	c.q_heads = C.int32_t(p.QHeads)
	c.head_dim = C.int32_t(p.HeadDim)
	c.dtype = C.kvc_dtype(p.DType)
	c.layout = C.kvc_layout(p.Layout)
	c.block_tokens = C.int32_t(p.BlockTokens)
	c.growth_factor = C.double(p.GrowthFactor)
	c.memory_limit = C.size_t(p.MemoryLimit)
	c.backend = m.optional(p.Backend)
	c.policy = m.optional(p.Policy)
	c.budget = C.int32_t(p.Budget)
	c.budget_ratio = C.double(p.BudgetRatio)
	c.sinks = C.int32_t(p.Sinks)
	c.recent = C.int32_t(p.Recent)
	if n := len(p.PolicyParams); n > 0 {
		kv := unsafe.Slice((*C.kvc_key_value)(m.alloc(n*C.sizeof_kvc_key_value)), n)
		for i, param := range p.PolicyParams {
			kv[i].key = m.str(param.Key)
			kv[i].value = m.str(param.Value)
		}
		c.policy_params = &kv[0]
		c.n_policy_params = C.size_t(n)
	}
	c.prefill = C.kvc_prefill_compression(p.Prefill)
	c.decode_every = C.int32_t(p.DecodeEvery)
	c.decode_slack = C.int32_t(p.DecodeSlack)
	c.k_dtype = C.int32_t(p.KDType)
	c.v_dtype = C.int32_t(p.VDType)
	c.k_rotation = C.int32_t(p.KRotation)
	c.prefix_cache = cBool(p.PrefixCache)
	c.prefix_store = m.optional(p.PrefixStore)
	c.prefix_write_through = cBool(p.PrefixWriteThrough)
	c.demote_k_dtype = C.int32_t(p.DemoteKDType)
	c.demote_v_dtype = C.int32_t(p.DemoteVDType)
	c.demote_keep = C.double(p.DemoteKeep)
	return c
}

// cBool is b as a C flag.
func cBool(b bool) C.int32_t {
	if b {
		return 1
	}
	return 0
}
