//! `Context`: plugins, configuration, thread arena and logger; thread-safe and shared.
use std::mem::MaybeUninit;
use std::path::Path;
use std::ptr::{self, NonNull};
use std::sync::{Arc, Mutex};

use crate::error::{check, Result};
use crate::logger::Logger;
use crate::strings::{c_path, c_string, owned};
use crate::sys;

/// A kvcache context: a shared handle, an `Arc` inside, so `clone` is cheap and gives the same
/// context. `Send + Sync`: the header makes every context call thread-safe. Each cache holds a
/// clone, so the library's context is destroyed with the last handle, after its caches, and a
/// struct may own a context and its caches together.
#[derive(Clone)]
pub struct Context {
    shared: Arc<Shared>,
}

/// What the clones of a `Context` share.
struct Shared {
    raw: NonNull<sys::kvc_context>,
    /// The logger installed by `Context::set_logger`; it lives until the library can no
    /// longer call it (replaced, or the context destroyed: fields drop after `Drop::drop`).
    logger: Mutex<Option<Logger>>,
}

// SAFETY: kvcache.h: "kvc_context: thread-safe, every call may be made from any thread
// concurrently"; the logger is `Send + Sync`.
unsafe impl Send for Shared {}
unsafe impl Sync for Shared {}

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
        let raw = NonNull::new(raw).expect("kvc_context_create succeeded with NULL");
        Context { shared: Arc::new(Shared { raw, logger: Mutex::new(None) }) }
    }

    /// Loads the plugins of the shared library at `path`.
    pub fn load_plugin(&self, path: &Path) -> Result<()> {
        let path = c_path(path)?;
        // SAFETY: a live context (thread-safe) and a valid C string.
        check(unsafe { sys::kvc_context_load_plugin(self.raw(), path.as_ptr()) })
    }

    /// Every loaded plugin.
    pub fn plugins(&self) -> Result<Vec<PluginInfo>> {
        // SAFETY: a live context.
        let count = unsafe { sys::kvc_context_plugin_count(self.raw()) };
        (0..count).map(|index| self.plugin(index)).collect()
    }

    fn plugin(&self, index: usize) -> Result<PluginInfo> {
        let mut info = MaybeUninit::<sys::kvc_plugin_info>::zeroed();
        // SAFETY: all-zero is a valid kvc_plugin_info (NULL strings); struct_size is set
        // before the call, and the strings it returns live as long as the context.
        unsafe {
            (*info.as_mut_ptr()).struct_size = std::mem::size_of::<sys::kvc_plugin_info>() as u32;
            check(sys::kvc_context_plugin_info(self.raw(), index, info.as_mut_ptr()))?;
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
        self.shared.raw.as_ptr()
    }

    pub(crate) fn logger_slot(&self) -> &Mutex<Option<Logger>> {
        &self.shared.logger
    }
}

impl Drop for Shared {
    fn drop(&mut self) {
        // SAFETY: the last handle is gone, and with it every cache (each holds a handle).
        unsafe { sys::kvc_context_destroy(self.raw.as_ptr()) }
    }
}
