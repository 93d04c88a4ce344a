// The plugin itself links nothing; its tests load it through the kvcache crate, so they get
// libkvcache's folder as an rpath (found as the kvcache crate finds it).
#[path = "../../ffi/rust/locate_library.rs"]
mod locate;

fn main() {
    if let Some(dir) = locate::lib_dir() {
        println!("cargo:rustc-link-arg-tests=-Wl,-rpath,{dir}");
    }
}
