//! Cache: kvc_cache_create, kvc_cache_create_from_yaml, kvc_cache_get_params, destroy.
mod common;

use common::*;
use kvcache::{CacheParams, Code, DType, Layout, Shape};

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
