//! Cache: kvc_cache_create, kvc_cache_create_from_yaml, kvc_cache_get_params, destroy.
mod common;

use common::*;
use kvcache::{Cache, CacheParams, Code, Context, DType, Layout, Prefill, Rotation, Shape};

#[test]
fn from_params_with_defaults_filled_in() {
    let context = context();
    let params = CacheParams {
        layers: 2,
        kv_heads: 2,
        head_dim: 32,
        dtype: DType::F32,
        layout: Layout::Contiguous,
        ..Default::default()
    };
    let cache = context.cache(&params).unwrap();
    assert_eq!(cache.shape(), Shape { layers: 2, kv_heads: 2, q_heads: 2, head_dim: 32 });
}

#[test]
fn from_yaml() {
    let context = context();
    let cache = context.cache_from_yaml(Some(&cache_yaml("bf16", ""))).unwrap();
    assert_eq!(cache.shape(), Shape { layers: 2, kv_heads: 2, q_heads: 4, head_dim: 16 });
}

#[test]
fn bad_params_are_refused_with_the_library_message() {
    let context = context();
    let err = context.cache(&CacheParams { head_dim: 2048, ..Default::default() }).err().unwrap();
    assert_eq!(err.code(), Code::InvalidArgument);
    assert!(err.message().contains("head_dim must be in 1..1024, got 2048"), "{err}");
    let err = context
        .cache(&CacheParams { backend: Some("no_such_backend".into()), ..Default::default() })
        .err()
        .unwrap();
    assert!(err.message().contains("no_such_backend"), "{err}");
    let err =
        context.cache(&CacheParams { policy: Some("bad\0name".into()), ..Default::default() }).err().unwrap();
    assert_eq!((err.code(), err.message()), (Code::InvalidArgument, "policy contains a NUL byte"));
}

#[test]
fn policy_from_params() {
    let context = context();
    let params =
        CacheParams { policy: Some("window".into()), budget: 32, sinks: Some(4), ..Default::default() };
    let info = context.cache(&params).unwrap().policy_info().unwrap();
    assert_eq!((info.name.as_str(), info.budget_tokens, info.sinks, info.recent), ("window", 32, 4, 0));
}

#[test]
fn the_builder_sets_every_field() {
    let params = CacheParams::new()
        .layers(3)
        .kv_heads(2)
        .q_heads(4)
        .head_dim(8)
        .dtype(DType::F32)
        .layout(Layout::Contiguous)
        .block_tokens(32)
        .growth_factor(1.5)
        .memory_limit(1 << 20)
        .backend("cpu")
        .policy("window")
        .budget(0)
        .budget_ratio(0.5)
        .sinks(2)
        .recent(3)
        .policy_param("unused", "1")
        .prefill(Prefill::Once)
        .decode_every(4)
        .decode_slack(5)
        .k_dtype(DType::Bf16)
        .v_dtype(DType::F16)
        .k_rotation(Rotation::Hadamard)
        .prefix_cache(true)
        .prefix_store("mem")
        .prefix_write_through(true)
        .demote_keep(0.5)
        .demote_k_dtype(DType::Q4_0)
        .demote_v_dtype(DType::Q8_0);
    let expected = CacheParams {
        layers: 3,
        kv_heads: 2,
        q_heads: 4,
        head_dim: 8,
        dtype: DType::F32,
        layout: Layout::Contiguous,
        block_tokens: 32,
        growth_factor: 1.5,
        memory_limit: 1 << 20,
        backend: Some("cpu".into()),
        policy: Some("window".into()),
        budget: 0,
        budget_ratio: 0.5,
        sinks: Some(2),
        recent: Some(3),
        policy_params: vec![("unused".into(), "1".into())],
        prefill: Prefill::Once,
        decode_every: 4,
        decode_slack: 5,
        k_dtype: Some(DType::Bf16),
        v_dtype: Some(DType::F16),
        k_rotation: Rotation::Hadamard,
        prefix_cache: true,
        prefix_store: Some("mem".into()),
        prefix_write_through: true,
        demote_keep: 0.5,
        demote_k_dtype: Some(DType::Q4_0),
        demote_v_dtype: Some(DType::Q8_0),
    };
    assert_eq!(params, expected);
}

#[test]
fn demotion_is_off_by_default_and_its_bad_values_are_refused() {
    let defaults = CacheParams::new();
    assert_eq!((defaults.demote_k_dtype, defaults.demote_v_dtype, defaults.demote_keep), (None, None, 0.25));
    let context = context();
    assert_eq!(context.cache(&defaults).unwrap().stats().unwrap().tokens_demoted, 0);

    let err = context.cache(&CacheParams::new().demote_k_dtype(DType::Q4_0)).err().unwrap();
    assert_eq!(err.code(), Code::InvalidArgument);
    assert!(err.message().contains("need a policy"), "{err}");
    let err = context
        .cache(&CacheParams::new().policy("window").budget(8).demote_v_dtype(DType::Q4_0).demote_keep(2.0))
        .err()
        .unwrap();
    assert_eq!(err.code(), Code::InvalidArgument);
    assert!(err.message().contains("demote_keep must be in [0, 1]"), "{err}");
}

#[test]
fn policy_and_trigger_fields_reach_the_library() {
    let context = context();
    let info = context
        .cache(&CacheParams::new().policy("window").budget(0).budget_ratio(0.25).sinks(2).recent(3))
        .unwrap()
        .policy_info()
        .unwrap();
    assert_eq!((info.budget_tokens, info.budget_ratio, info.sinks, info.recent), (0, 0.25, 2, 3));

    let err = context.cache(&CacheParams::new().policy("window").budget(8).decode_every(-1)).err().unwrap();
    assert!(err.message().contains("decode_every and decode_slack must be >= 0"), "{err}");
    let err = context
        .cache(&CacheParams::new().policy("window").budget(8).policy_param("k", "a\0b"))
        .err()
        .unwrap();
    assert_eq!((err.code(), err.message()), (Code::InvalidArgument, "k contains a NUL byte"));
}

#[test]
fn k_and_v_formats_of_their_own() {
    let context = context();
    let f32_row = DType::F32.describe().unwrap().row_bytes(64);
    let bf16_row = DType::Bf16.describe().unwrap().row_bytes(64);
    let reserve = |params: CacheParams| {
        let mut cache = context.cache(&params.head_dim(64).layout(Layout::Contiguous)).unwrap();
        cache.create_seq(0).unwrap();
        cache.reserve(0, 100).unwrap();
        cache.stats().unwrap().bytes_used
    };
    let both_f32 = reserve(CacheParams::new().dtype(DType::F32));
    let k_bf16 = reserve(CacheParams::new().dtype(DType::F32).k_dtype(DType::Bf16));
    assert_eq!(both_f32 - k_bf16, 100 * (f32_row - bf16_row), "{both_f32} {k_bf16}");
}

#[test]
fn quantized_formats_store_their_table_sizes() {
    let q8 = DType::Q8_0.describe().unwrap();
    assert_eq!(q8, kvcache::FormatInfo { name: "q8_0".into(), group_size: 32, group_bytes: 34 });
    let q4 = DType::Q4_0.describe().unwrap();
    assert_eq!(q4, kvcache::FormatInfo { name: "q4_0".into(), group_size: 32, group_bytes: 18 });
    let context = context();
    let reserve = |params: CacheParams| {
        let mut cache = context.cache(&params.head_dim(64).layout(Layout::Contiguous)).unwrap();
        cache.create_seq(0).unwrap();
        cache.reserve(0, 100).unwrap();
        cache.stats().unwrap().bytes_used
    };
    let both_f16 = reserve(CacheParams::new().dtype(DType::F16));
    let quantized = reserve(CacheParams::new().k_dtype(DType::Q8_0).v_dtype(DType::Q4_0));
    let f16_row = DType::F16.describe().unwrap().row_bytes(64);
    assert_eq!(both_f16 - quantized, 100 * (2 * f16_row - q8.row_bytes(64) - q4.row_bytes(64)));
    let err = context.cache(&CacheParams::new().dtype(DType::Q8_0).head_dim(40)).err().unwrap();
    assert_eq!(err.code(), Code::InvalidArgument);
    assert!(err.message().contains("q8_0"), "{err}");
}

/// The reason `Context` is shared: an engine owns its context and its caches in one struct.
struct Engine {
    context: Context,
    cache: Cache,
}

#[test]
fn a_struct_owns_a_context_and_its_cache_and_a_cache_outlives_the_handle() {
    let context = context();
    let engine = Engine { cache: context.cache(&CacheParams::new().layers(2)).unwrap(), context };
    let Engine { context, cache } = engine;
    drop(context);
    assert_eq!(cache.shape().layers, 2);
    assert!(!cache.context().plugins().unwrap().is_empty());
}
