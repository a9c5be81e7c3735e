// Shared by the build scripts of arl-model, arl-train and arl-serve (through
// `include!`): link-time wiring for a package whose binaries or tests run on
// libtorch. Link arguments apply only to the package that prints them, so
// each of those packages runs this itself.

/// The libtorch directory that `torch-sys` found (the PyTorch wheel's
/// `torch/lib` with `LIBTORCH_USE_PYTORCH=1`), from its `links = "tch"`
/// metadata: the package must depend on `torch-sys` directly.
fn libtorch_lib() -> Option<std::path::PathBuf> {
    std::env::var_os("DEP_TCH_LIBTORCH_LIB").map(std::path::PathBuf::from)
}

/// An rpath to libtorch, so the binaries run without `LD_LIBRARY_PATH`, and
/// `libtorch_cuda.so` linked with `--no-as-needed` into `bins` (and the
/// package's tests): nothing in Rust references a symbol of it, so under the
/// default `--as-needed` the linker drops it and CUDA silently stays
/// unavailable on a GPU machine.
///
/// `ARL_TORCH_RPATH` (directories, `:`-separated) goes in the rpath before
/// the build machine's libtorch: where a binary built here finds libtorch on
/// another machine (`make device-bundle`: the GPU machine's PyTorch).
fn link_libtorch(lib: &std::path::Path, bins: &[&str]) {
    println!("cargo:rerun-if-env-changed=ARL_TORCH_RPATH");
    if let Ok(dirs) = std::env::var("ARL_TORCH_RPATH") {
        for dir in dirs.split(':').filter(|d| !d.is_empty()) {
            println!("cargo:rustc-link-arg=-Wl,-rpath,{dir}");
        }
    }
    println!("cargo:rustc-link-arg=-Wl,-rpath,{}", lib.display());
    if lib.join("libtorch_cuda.so").exists() {
        for bin in bins {
            println!("cargo:rustc-link-arg-bin={bin}=-Wl,--no-as-needed,-ltorch_cuda,--as-needed");
        }
        println!("cargo:rustc-link-arg-tests=-Wl,--no-as-needed,-ltorch_cuda,--as-needed");
    }
}
