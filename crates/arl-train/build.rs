//! libtorch's rpath and `libtorch_cuda` for `arl-train` and its tests (see
//! `arl-model/build/libtorch_link.rs`), and an rpath to the MPI libraries
//! arl-dist links (`DEP_ARL_MPI_RPATH`), when it was built with them.
include!("../arl-model/build/libtorch_link.rs");

fn main() {
    println!("cargo:rerun-if-changed=build.rs");
    if let Some(lib) = libtorch_lib() {
        link_libtorch(&lib, &["arl-train"]);
    }
    if let Ok(dirs) = std::env::var("DEP_ARL_MPI_RPATH") {
        for dir in dirs.split(':').filter(|d| !d.is_empty()) {
            println!("cargo:rustc-link-arg=-Wl,-rpath,{dir}");
        }
    }
}
