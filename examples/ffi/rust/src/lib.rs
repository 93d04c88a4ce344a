//! Safe Rust bindings to kvcache's C API (`kvcache/kvcache.h`), with no dependency beyond the
//! standard library. The `kvcache-sys` crate (re-exported as `sys`) declares the C API by hand
//! and links libkvcache; this crate wraps it:
//!
//! - handles (`Context`, `Cache`) free themselves on `Drop`;
//! - every fallible call returns `Result<_, Error>`, the error carrying the status `Code` and
//!   the library's message;
//! - tensors are f32 slices whose lengths are checked against the cache's shape before the
//!   call;
//! - `Context` is a shared handle (an `Arc` inside; `clone` is cheap): a `Cache` holds one, so
//!   the context lives as long as its last cache and a struct may own both;
//! - `Context` is `Send + Sync` (thread-safe); `Cache` is `Send` only. Calls that create or
//!   remove sequences take `&mut Cache`; for concurrent calls on disjoint sequences,
//!   `Cache::split` gives one `Send` `Shard` per group of sequences.
//!
//! A cache keeps its context alive:
//! ```no_run
//! let cache = {
//!     let context = kvcache::Context::new("").unwrap();
//!     context.cache(&kvcache::CacheParams::new().layers(2)).unwrap()
//! };
//! assert_eq!(cache.shape().layers, 2);
//! ```
//! No sequence can be created while shards are out:
//! ```compile_fail,E0499
//! # let context = kvcache::Context::new("").unwrap();
//! let mut cache = context.cache(&kvcache::CacheParams::default()).unwrap();
//! let shards = cache.split(&[&[0], &[1]]).unwrap();
//! cache.create_seq(2).unwrap();
//! drop(shards);
//! ```
//! A cache cannot be shared between threads by reference (it is not `Sync`):
//! ```compile_fail,E0277
//! fn shared<T: Sync>(_: &T) {}
//! let context = kvcache::Context::new("").unwrap();
//! shared(&context.cache(&kvcache::CacheParams::default()).unwrap());
//! ```
pub use kvcache_sys as sys;

mod cache;
mod context;
mod data;
mod error;
mod logger;
mod params;
mod policy;
mod prefix_cache;
mod seq_ops;
mod shard;
mod stats;
mod stores;
mod strings;

pub use cache::{Cache, EstimateRequest, Shape};
pub use context::{Context, PluginInfo, PluginKind};
pub use data::{Attention, Batch};
pub use error::{Code, Error, Result};
pub use logger::LogLevel;
pub use params::{describe_raw, CacheParams, DType, FormatInfo, Layout, Prefill, Rotation};
pub use policy::{PolicyInfo, StatKind};
pub use shard::Shard;
pub use stats::Stats;
pub use stores::Prefix;

/// The library's version as MAJOR * 10000 + MINOR * 100 + PATCH.
pub fn version_number() -> u32 {
    // SAFETY: no arguments, no state.
    unsafe { sys::kvc_version() }
}

/// The library's version, "MAJOR.MINOR.PATCH".
pub fn version() -> &'static str {
    // SAFETY: static storage.
    unsafe { std::ffi::CStr::from_ptr(sys::kvc_version_string()) }.to_str().unwrap_or("")
}
