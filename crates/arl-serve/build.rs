//! libtorch's rpath and `libtorch_cuda` for `arl-serve` and its tests (see
//! `arl-model/build/libtorch_link.rs`).
include!("../arl-model/build/libtorch_link.rs");

fn main() {
    println!("cargo:rerun-if-changed=build.rs");
    if let Some(lib) = libtorch_lib() {
        link_libtorch(&lib, &["arl-serve"]);
    }
}
