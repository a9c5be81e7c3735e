//! csrc/arl_autocast.cpp (libtorch autocast in bf16, CUDA or CPU, for
//! `--precision amp`) and csrc/arl_device.cpp (the CUDA allocator's peak
//! memory) compiled against the headers of the libtorch that
//! `torch-sys` found, as torch-sys compiles its own C++; and libtorch's rpath
//! for this package's tests.
include!("build/libtorch_link.rs");

fn main() {
    println!("cargo:rerun-if-changed=build.rs");
    println!("cargo:rerun-if-changed=build/libtorch_link.rs");
    println!("cargo:rerun-if-changed=csrc/arl_autocast.cpp");
    println!("cargo:rerun-if-changed=csrc/arl_device.cpp");
    let Some(lib) = libtorch_lib() else { return };
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
        .file("csrc/arl_device.cpp")
        .compile("arl_autocast");
    link_libtorch(&lib, &[]);
}
