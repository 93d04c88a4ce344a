// The plugin itself links nothing; its tests load it through the kvcache crate, so they get
// libkvcache's folder as an rpath (found as kvcache-sys finds it: the DEP_ variables of a
// dev-dependency do not reach a build script).
#[path = "../../ffi/rust/kvcache-sys/locate_library.rs"]
mod locate;

fn main() {
    println!("cargo:rustc-link-arg-tests=-Wl,-rpath,{}", locate::lib_dir());
}
