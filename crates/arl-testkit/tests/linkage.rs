//! The data tools start without libtorch or MPI: `readelf -d` on each binary
//! lists no libtorch, c10 or MPI library among what it needs, while the
//! trainer needs libtorch (CUDA's part named explicitly, so a GPU is found)
//! and MPI when built with it — the check itself can fail.
use arl_testkit::common::exe;
use std::process::Command;

/// The data tools: everything but the trainer and the server.
const DATA_TOOLS: [&str; 8] =
    ["arl-advantage", "arl-env", "arl-filter", "arl-inspect", "arl-reward", "arl-rollout", "arl-sync", "arl-tasks"];

/// The shared libraries a binary needs (`NEEDED` entries of its dynamic section).
fn needed(bin: &str) -> Vec<String> {
    let o = Command::new("readelf").arg("-d").arg(exe(bin)).output().expect("run readelf (binutils)");
    assert!(o.status.success(), "readelf -d {bin}: {}", String::from_utf8_lossy(&o.stderr));
    String::from_utf8_lossy(&o.stdout)
        .lines()
        .filter(|l| l.contains("(NEEDED)"))
        .filter_map(|l| l.split('[').nth(1).map(|s| s.trim_end_matches(']').to_string()))
        .collect()
}

fn heavy(lib: &str) -> bool {
    lib.contains("torch") || lib.starts_with("libc10") || lib.contains("mpi")
}

#[test]
fn data_tools_need_neither_libtorch_nor_mpi() {
    for t in DATA_TOOLS {
        let libs = needed(t);
        assert!(libs.iter().any(|l| l.starts_with("libc.so")), "{t}: no NEEDED entries read: {libs:?}");
        let bad: Vec<&String> = libs.iter().filter(|l| heavy(l)).collect();
        assert!(bad.is_empty(), "{t} needs {bad:?}");
    }
    let train = needed("arl-train");
    for lib in ["libtorch_cpu.so", "libtorch_cuda.so", "libc10.so"] {
        assert!(train.iter().any(|l| l == lib), "arl-train does not need {lib}: {train:?}");
    }
    // Built where OpenMPI is (`mpicc`), the trainer links it.
    if Command::new("mpicc").arg("--showme:version").output().is_ok_and(|o| o.status.success()) {
        assert!(train.iter().any(|l| l.starts_with("libmpi")), "arl-train: {train:?}");
    }
    let serve = needed("arl-serve");
    assert!(serve.iter().any(|l| l == "libtorch_cuda.so"), "arl-serve: {serve:?}");
    assert!(!serve.iter().any(|l| l.contains("mpi")), "arl-serve needs MPI: {serve:?}");
}
