// Finds the folder holding libkvcache.so for build scripts: $KVCACHE_LIB_DIR, else
// `pkg-config --libs kvcache`. Shared with examples/plugins/rust_policy/build.rs (through #[path]).
use std::env;
use std::process::Command;

/// The folder to link from, or None when pkg-config says the library is in a folder the
/// linker searches anyway (it then prints no -L).
pub fn lib_dir() -> Option<String> {
    println!("cargo:rerun-if-env-changed=KVCACHE_LIB_DIR");
    println!("cargo:rerun-if-env-changed=PKG_CONFIG_PATH");
    if let Ok(dir) = env::var("KVCACHE_LIB_DIR") {
        return Some(dir);
    }
    let output = Command::new("pkg-config").args(["--libs", "kvcache"]).output();
    match output {
        Ok(out) if out.status.success() => String::from_utf8_lossy(&out.stdout)
            .split_whitespace()
            .find_map(|flag| flag.strip_prefix("-L").map(str::to_owned)),
        Ok(out) => not_found(&String::from_utf8_lossy(&out.stderr)),
        Err(err) => not_found(&format!("cannot run pkg-config: {err}")),
    }
}

fn not_found(why: &str) -> ! {
    panic!(
        "libkvcache not found: set KVCACHE_LIB_DIR to the folder holding libkvcache.so, or \
         install kvcache where `pkg-config --libs kvcache` finds it ({})",
        why.trim()
    )
}
