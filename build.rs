//! Link-time wiring for the libtorch binaries (feature `torch`).
//!
//! * An rpath to the libtorch directory that `torch-sys` found (the PyTorch
//!   wheel's `torch/lib` when built with `LIBTORCH_USE_PYTORCH=1`), so the
//!   binaries run without `LD_LIBRARY_PATH`.
//! * `libtorch_cuda.so` linked with `--no-as-needed` into the binaries that
//!   train or serve: nothing in Rust references a symbol of it, so under the
//!   default `--as-needed` the linker drops it and CUDA silently stays
//!   unavailable on a GPU machine.
use std::path::Path;

fn main() {
    println!("cargo:rerun-if-changed=build.rs");
    if std::env::var_os("CARGO_FEATURE_TORCH").is_none() {
        return;
    }
    let Some(lib) = std::env::var_os("DEP_TCH_LIBTORCH_LIB") else {
        return;
    };
    let lib = Path::new(&lib);
    println!("cargo:rustc-link-arg=-Wl,-rpath,{}", lib.display());
    if lib.join("libtorch_cuda.so").exists() {
        // Only for binaries that exist: cargo rejects flags for unknown targets.
        for bin in ["arl-train", "arl-serve"].into_iter().filter(|b| Path::new(&format!("bin/{b}.rs")).exists()) {
            println!("cargo:rustc-link-arg-bin={bin}=-Wl,--no-as-needed,-ltorch_cuda,--as-needed");
        }
        println!("cargo:rustc-link-arg-tests=-Wl,--no-as-needed,-ltorch_cuda,--as-needed");
    }
}
