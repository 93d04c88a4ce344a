//! `Context`: plugins, configuration and thread arena; thread-safe.
use std::mem::MaybeUninit;
use std::path::Path;
use std::ptr::{self, NonNull};

use crate::error::{check, Result};
use crate::strings::{c_path, c_string, owned};
use crate::sys;

/// A kvcache context. `Send + Sync`: the header makes every context call thread-safe, so it
/// may be shared by reference (or in an `Arc`) across threads. Caches borrow it, so it
/// cannot be dropped while one lives.
pub struct Context {
    raw: NonNull<sys::kvc_context>,
}

// SAFETY: kvcache.h: "kvc_context: thread-safe, every call may be made from any thread
// concurrently".
unsafe impl Send for Context {}
unsafe impl Sync for Context {}

/// Which kind of plugin a library registered.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PluginKind {
    Policy,
    Backend,
    /// An offload and sharing tier: `host`, `disk`, `redis` (plugin ABI 1.2).
    Store,
    /// A kind this crate does not know yet.
    Other(i32),
}

/// A loaded plugin, copied out of the context.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PluginInfo {
    pub kind: PluginKind,
    pub name: String,
    pub version: u32,
    pub path: String,
}

impl Context {
    /// Creates a context from YAML text (docs/config.md); "" gives the defaults.
    pub fn new(yaml: &str) -> Result<Context> {
        let yaml = c_string("yaml", yaml)?;
        let mut raw = ptr::null_mut();
        // SAFETY: a valid C string and out-pointer; on success `raw` is a new context we own.
        check(unsafe { sys::kvc_context_create(yaml.as_ptr(), &mut raw) })?;
        Ok(Context::own(raw))
    }

    /// Creates a context from a YAML file.
    pub fn from_file(path: &Path) -> Result<Context> {
        let path = c_path(path)?;
        let mut raw = ptr::null_mut();
        // SAFETY: as in new().
        check(unsafe { sys::kvc_context_create_from_file(path.as_ptr(), &mut raw) })?;
        Ok(Context::own(raw))
    }

    fn own(raw: *mut sys::kvc_context) -> Context {
        Context { raw: NonNull::new(raw).expect("kvc_context_create succeeded with NULL") }
    }

    /// Loads the plugins of the shared library at `path`.
    pub fn load_plugin(&self, path: &Path) -> Result<()> {
        let path = c_path(path)?;
        // SAFETY: a live context (thread-safe) and a valid C string.
        check(unsafe { sys::kvc_context_load_plugin(self.raw.as_ptr(), path.as_ptr()) })
    }

    /// Every loaded plugin.
    pub fn plugins(&self) -> Result<Vec<PluginInfo>> {
        // SAFETY: a live context.
        let count = unsafe { sys::kvc_context_plugin_count(self.raw.as_ptr()) };
        (0..count).map(|index| self.plugin(index)).collect()
    }

    fn plugin(&self, index: usize) -> Result<PluginInfo> {
        let mut info = MaybeUninit::<sys::kvc_plugin_info>::zeroed();
        // SAFETY: all-zero is a valid kvc_plugin_info (NULL strings); struct_size is set
        // before the call, and the strings it returns live as long as the context.
        unsafe {
            (*info.as_mut_ptr()).struct_size = std::mem::size_of::<sys::kvc_plugin_info>() as u32;
            check(sys::kvc_context_plugin_info(self.raw.as_ptr(), index, info.as_mut_ptr()))?;
            let info = info.assume_init();
            Ok(PluginInfo {
                kind: match info.kind {
                    sys::KVC_PLUGIN_POLICY => PluginKind::Policy,
                    sys::KVC_PLUGIN_BACKEND => PluginKind::Backend,
                    sys::KVC_PLUGIN_STORE => PluginKind::Store,
                    other => PluginKind::Other(other),
                },
                name: owned(info.name),
                version: info.version,
                path: owned(info.path),
            })
        }
    }

    pub(crate) fn raw(&self) -> *mut sys::kvc_context {
        self.raw.as_ptr()
    }
}

impl Drop for Context {
    fn drop(&mut self) {
        // SAFETY: we own the context, and no cache borrows it any more.
        unsafe { sys::kvc_context_destroy(self.raw.as_ptr()) }
    }
}
