//! The policy's vtable: parameters, needs and scores.
use std::ffi::{c_void, CStr};

use crate::abi::{
    fail, job_at, kvc_host_api, kvc_plugin_error, kvc_policy_needs, kvc_policy_param, kvc_policy_vtable,
    kvc_score_job, KVC_ERR_CONFIG, KVC_ERR_PLUGIN, KVC_OK,
};
use crate::has_field;

pub static VTABLE: kvc_policy_vtable = kvc_policy_vtable {
    struct_size: std::mem::size_of::<kvc_policy_vtable>() as u32,
    create: Some(create),
    destroy: Some(destroy),
    needs: Some(needs),
    score: Some(score),
    budgets: None,
};

struct Cycle {
    period: i32,
}

/// Parses `period` (an integer in 2..=16, default 7); any other key is a config error.
unsafe extern "C" fn create(
    _host: *const kvc_host_api,
    params: *const kvc_policy_param,
    n_params: usize,
    out_instance: *mut *mut c_void,
    error: *mut kvc_plugin_error,
) -> i32 {
    let mut period = 7;
    for i in 0..n_params {
        let param = &*params.add(i);
        let key = CStr::from_ptr(param.key).to_string_lossy();
        let value = CStr::from_ptr(param.value).to_string_lossy();
        if key != "period" {
            let message = format!("policy.params.{key}: unknown parameter for rust_cycle (known: period)");
            return fail(error, KVC_ERR_CONFIG, &message);
        }
        match value.parse::<i32>() {
            Ok(p) if (2..=16).contains(&p) => period = p,
            _ => {
                let message = format!("policy.params.period: expected an integer in 2..16, got '{value}'");
                return fail(error, KVC_ERR_CONFIG, &message);
            }
        }
    }
    *out_instance = Box::into_raw(Box::new(Cycle { period })).cast();
    KVC_OK
}

unsafe extern "C" fn destroy(instance: *mut c_void) {
    drop(Box::from_raw(instance.cast::<Cycle>()));
}

/// No statistics; no sinks or recent tokens unless configured.
unsafe extern "C" fn needs(_instance: *mut c_void, out: *mut kvc_policy_needs) {
    (*out).stats = 0;
    if has_field!(out, kvc_policy_needs, default_recent) {
        (*out).default_sinks = 0;
        (*out).default_recent = 0;
    }
}

unsafe extern "C" fn score(
    instance: *mut c_void,
    jobs: *const kvc_score_job,
    n_jobs: usize,
    error: *mut kvc_plugin_error,
) -> i32 {
    let period = (*instance.cast::<Cycle>()).period;
    for j in 0..n_jobs {
        let job = job_at(jobs, j);
        if !has_field!(job, kvc_score_job, scores) {
            return fail(error, KVC_ERR_PLUGIN, "rust_cycle: the host's score jobs lack `scores`");
        }
        let n = (*job).n_tokens as usize;
        let pos = std::slice::from_raw_parts((*job).pos, n);
        let scores = std::slice::from_raw_parts_mut((*job).scores, n);
        for (score, &p) in scores.iter_mut().zip(pos) {
            *score = cycle_score(p, period);
        }
    }
    KVC_OK
}

/// Distance from the cycle's middle in the high bits, the position (mod 2^20) below it, so
/// ties go to the newer token; exact in f32 (below 2^24 since period <= 16).
fn cycle_score(position: i32, period: i32) -> f32 {
    let distance = (position.rem_euclid(period) - period / 2).abs();
    ((distance << 20) | (position & 0xF_FFFF)) as f32
}
