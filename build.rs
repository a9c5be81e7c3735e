//! Link-time wiring for the libtorch binaries (feature `torch`) and the MPI
//! shim (feature `mpi`).
//!
//! * An rpath to the libtorch directory that `torch-sys` found (the PyTorch
//!   wheel's `torch/lib` when built with `LIBTORCH_USE_PYTORCH=1`), so the
//!   binaries run without `LD_LIBRARY_PATH`.
//! * `libtorch_cuda.so` linked with `--no-as-needed` into the binaries that
//!   train or serve: nothing in Rust references a symbol of it, so under the
//!   default `--as-needed` the linker drops it and CUDA silently stays
//!   unavailable on a GPU machine.
//! * csrc/arl_autocast.cpp (libtorch autocast in bf16, CUDA or CPU, for
//!   `--precision amp`) compiled against that libtorch's headers.
//! * Feature `mpi`: csrc/arl_mpi.c compiled and linked with the include and
//!   library flags that `mpicc --showme:compile` / `--showme:link` print
//!   (OpenMPI's compiler wrapper; `MPICC` overrides which one).
use std::path::Path;

fn main() {
    println!("cargo:rerun-if-changed=build.rs");
    build_mpi_shim();
    if std::env::var_os("CARGO_FEATURE_TORCH").is_none() {
        return;
    }
    let Some(lib) = std::env::var_os("DEP_TCH_LIBTORCH_LIB") else {
        return;
    };
    let lib = Path::new(&lib);
    build_autocast_shim(lib);
    println!("cargo:rustc-link-arg=-Wl,-rpath,{}", lib.display());
    if lib.join("libtorch_cuda.so").exists() {
        // Only for binaries that exist: cargo rejects flags for unknown targets.
        for bin in ["arl-train", "arl-serve"].into_iter().filter(|b| Path::new(&format!("bin/{b}.rs")).exists()) {
            println!("cargo:rustc-link-arg-bin={bin}=-Wl,--no-as-needed,-ltorch_cuda,--as-needed");
        }
        println!("cargo:rustc-link-arg-tests=-Wl,--no-as-needed,-ltorch_cuda,--as-needed");
    }
}

/// csrc/arl_autocast.cpp against the headers of the libtorch in `lib`
/// (`…/torch/lib` → `…/torch/include`), as torch-sys compiles its own C++.
#[cfg(feature = "torch")]
fn build_autocast_shim(lib: &Path) {
    println!("cargo:rerun-if-changed=csrc/arl_autocast.cpp");
    let root = lib.parent().expect("libtorch's lib directory has a parent");
    cc::Build::new()
        .cpp(true)
        .pic(true)
        .warnings(false)
        .include(root.join("include"))
        .include(root.join("include/torch/csrc/api/include"))
        .flag("-std=c++17")
        .flag("-DGLOG_USE_GLOG_EXPORT")
        .file("csrc/arl_autocast.cpp")
        .compile("arl_autocast");
}

#[cfg(not(feature = "torch"))]
fn build_autocast_shim(_: &Path) {}

#[cfg(feature = "mpi")]
fn build_mpi_shim() {
    println!("cargo:rerun-if-changed=csrc/arl_mpi.c");
    println!("cargo:rerun-if-env-changed=MPICC");
    let mpicc = std::env::var("MPICC").unwrap_or_else(|_| "mpicc".into());
    let showme = |what: &str| -> Vec<String> {
        let out = std::process::Command::new(&mpicc).arg(format!("--showme:{what}")).output();
        match out {
            Ok(o) if o.status.success() => {
                String::from_utf8_lossy(&o.stdout).split_whitespace().map(str::to_string).collect()
            }
            _ => panic!(
                "feature `mpi` needs OpenMPI's `{mpicc} --showme:{what}`: install it with scripts/setup.sh \
                 (Debian: openmpi-bin libopenmpi-dev), or build without it: \
                 `cargo build --no-default-features --features torch`"
            ),
        }
    };
    let mut build = cc::Build::new();
    build.file("csrc/arl_mpi.c").warnings(true);
    for f in showme("compile") {
        match f.strip_prefix("-I") {
            Some(dir) => {
                build.include(dir);
            }
            None => {
                build.flag(&f);
            }
        }
    }
    build.compile("arl_mpi");
    for f in showme("link") {
        if let Some(dir) = f.strip_prefix("-L") {
            println!("cargo:rustc-link-search=native={dir}");
            println!("cargo:rustc-link-arg=-Wl,-rpath,{dir}");
        } else if let Some(lib) = f.strip_prefix("-l") {
            println!("cargo:rustc-link-lib=dylib={lib}");
        } else if f.starts_with("-Wl,") || f == "-pthread" {
            println!("cargo:rustc-link-arg={f}");
        }
    }
}

#[cfg(not(feature = "mpi"))]
fn build_mpi_shim() {}
