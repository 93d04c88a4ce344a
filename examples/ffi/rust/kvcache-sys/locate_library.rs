// Finds the folder holding libkvcache.so for build scripts: $KVCACHE_LIB_DIR (a build tree),
// else the `libdir` that `pkg-config` reports for an installed kvcache. Shared with
// examples/plugins/rust_policy/build.rs (through #[path]).
use std::env;
use std::process::Command;

pub fn lib_dir() -> String {
    println!("cargo:rerun-if-env-changed=KVCACHE_LIB_DIR");
    println!("cargo:rerun-if-env-changed=PKG_CONFIG_PATH");
    if let Ok(dir) = env::var("KVCACHE_LIB_DIR") {
        return dir;
    }
    let output = Command::new("pkg-config").args(["--variable=libdir", "kvcache"]).output();
    match output {
        Ok(out) if out.status.success() => match String::from_utf8_lossy(&out.stdout).trim() {
            "" => not_found("kvcache.pc has no libdir"),
            dir => dir.to_owned(),
        },
        Ok(out) => match String::from_utf8_lossy(&out.stderr).trim() {
            "" => not_found("pkg-config finds no kvcache.pc"),
            why => not_found(why),
        },
        Err(err) => not_found(&format!("cannot run pkg-config: {err}")),
    }
}

fn not_found(why: &str) -> ! {
    panic!(
        "libkvcache not found: set KVCACHE_LIB_DIR to the folder holding libkvcache.so, or \
         install kvcache where `pkg-config --variable=libdir kvcache` finds it, adding its \
         lib/pkgconfig folder to PKG_CONFIG_PATH for a prefix of your own ({})",
        why.trim()
    )
}
