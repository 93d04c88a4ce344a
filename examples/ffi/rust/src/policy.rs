//! `PolicyInfo` (`kvc_cache_policy_info`) and `StatKind` (`kvc_report_stats`).
use std::mem::MaybeUninit;

use crate::error::{check, Result};
use crate::strings::owned;
use crate::sys;

/// The policy a cache compresses with, as in effect (the policy's defaults applied).
#[derive(Clone, Debug, PartialEq)]
pub struct PolicyInfo {
    pub name: String,
    pub sinks: i32,
    pub recent: i32,
    /// Tokens kept per (sequence, layer, KV head); 0: `budget_ratio` applies.
    pub budget_tokens: i32,
    pub budget_ratio: f64,
    /// What the policy reads, as `kvc_stat_flags` bits of kvcache_plugin.h.
    pub stats: u32,
    pub observation_window: i32,
}

impl PolicyInfo {
    pub(crate) fn read(cache: *const sys::kvc_cache) -> Result<PolicyInfo> {
        let mut info = MaybeUninit::<sys::kvc_policy_info>::uninit();
        // SAFETY: init zero-fills and sets struct_size; the name lives as long as the cache
        // and is copied at once. Callers hold the cache without concurrent calls.
        unsafe {
            sys::kvc_policy_info_init_sized(info.as_mut_ptr(), std::mem::size_of::<sys::kvc_policy_info>());
            check(sys::kvc_cache_policy_info(cache, info.as_mut_ptr()))?;
            let info = info.assume_init();
            Ok(PolicyInfo {
                name: owned(info.name),
                sinks: info.sinks,
                recent: info.recent,
                budget_tokens: info.budget_tokens,
                budget_ratio: info.budget_ratio,
                stats: info.stats,
                observation_window: info.observation_window,
            })
        }
    }
}

/// Attention statistics an engine computed with its own kernels.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum StatKind {
    /// Added to the accumulated attention mass (H2O).
    AttnSum,
    /// Replaces the last query's attention (TOVA).
    AttnLast,
    /// Replaces the observation window's attention (SnapKV).
    AttnWindow,
}

impl StatKind {
    pub(crate) fn raw(self) -> sys::kvc_stat_kind {
        match self {
            StatKind::AttnSum => sys::KVC_STAT_KIND_ATTN_SUM,
            StatKind::AttnLast => sys::KVC_STAT_KIND_ATTN_LAST,
            StatKind::AttnWindow => sys::KVC_STAT_KIND_ATTN_WINDOW,
        }
    }
}
