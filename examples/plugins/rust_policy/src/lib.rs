//! `rust_cycle`: a kvcache eviction policy written in Rust, built as a plugin library
//! (`libkvc_policy_rust_cycle.so`) against the plugin ABI declared by hand in `abi`.
//!
//! Rule: a token at position `p` scores its distance from the middle of a cycle of `period`
//! positions, `|p mod period - period / 2|`; ties go to the newer token. The host keeps each
//! head's `sinks` first and `recent` last tokens, then the best-scored up to the budget.
//!
//! ```yaml
//! plugins: { paths: [/path/to/libkvc_policy_rust_cycle.so] }
//! policy: { name: rust_cycle, budget: 256, sinks: 0, recent: 0, params: { period: 7 } }
//! ```
pub mod abi;
mod cycle;

use abi::{kvc_host_api, kvc_plugin_descriptor, kvc_plugin_error, KVC_OK};

/// The descriptor holds raw pointers to static data, which is never written.
struct Descriptor(kvc_plugin_descriptor);
// SAFETY: it points at a static C string and a static vtable, both immutable.
unsafe impl Sync for Descriptor {}

static DESCRIPTOR: Descriptor = Descriptor(kvc_plugin_descriptor {
    struct_size: std::mem::size_of::<kvc_plugin_descriptor>() as u32,
    abi_version: abi::KVC_PLUGIN_ABI_VERSION,
    kind: abi::KVC_PLUGIN_POLICY,
    name: c"rust_cycle".as_ptr(),
    version: 1,
    vtable: &cycle::VTABLE as *const abi::kvc_policy_vtable as *const std::ffi::c_void,
});

/// The entry point the host looks up (`KVC_PLUGIN_ENTRY_SYMBOL`); a cdylib exports exactly
/// its `#[no_mangle]` functions, so this is the only symbol.
///
/// # Safety
/// Called by the host with valid out-pointers, as `kvc_plugin_entry_fn` says.
#[no_mangle]
pub unsafe extern "C" fn kvc_plugin_entry(
    _host: *const kvc_host_api,
    out_descriptors: *mut *const kvc_plugin_descriptor,
    out_count: *mut usize,
    _error: *mut kvc_plugin_error,
) -> i32 {
    *out_descriptors = &DESCRIPTOR.0;
    *out_count = 1;
    KVC_OK
}

/// Checked at compile time: the entry point has the ABI's type.
const _: abi::kvc_plugin_entry_fn = kvc_plugin_entry;
