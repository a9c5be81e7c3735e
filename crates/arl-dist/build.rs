//! The MPI shim (feature `mpi`, on by default): csrc/arl_mpi.c compiled and
//! linked with the include and library flags that `mpicc --showme:compile` /
//! `--showme:link` print (OpenMPI's compiler wrapper; `MPICC` overrides which
//! one). Without `mpicc` the crate builds without MPI, with a warning: the
//! trainer then runs as one process (`arl_dist::MPI` is false).
//!
//! Sets `cfg(arl_mpi)` when the shim is built, and tells dependents (through
//! `links = "arl_mpi"`) the library directories to put in their rpath.
fn main() {
    println!("cargo:rerun-if-changed=build.rs");
    println!("cargo:rerun-if-changed=csrc/arl_mpi.c");
    println!("cargo:rerun-if-env-changed=MPICC");
    println!("cargo:rustc-check-cfg=cfg(arl_mpi)");
    if std::env::var_os("CARGO_FEATURE_MPI").is_none() {
        return;
    }
    let mpicc = std::env::var("MPICC").unwrap_or_else(|_| "mpicc".into());
    let showme = |what: &str| -> Option<Vec<String>> {
        let o = std::process::Command::new(&mpicc).arg(format!("--showme:{what}")).output().ok()?;
        o.status.success().then(|| String::from_utf8_lossy(&o.stdout).split_whitespace().map(str::to_string).collect())
    };
    let (Some(compile), Some(link)) = (showme("compile"), showme("link")) else {
        println!(
            "cargo:warning=OpenMPI's `{mpicc} --showme` failed: arl-train is built without MPI (one process only). \
             Install it with scripts/setup.sh (Debian: openmpi-bin libopenmpi-dev) for data-parallel training."
        );
        return;
    };
    let mut build = cc::Build::new();
    build.file("csrc/arl_mpi.c").warnings(true);
    for f in compile {
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
    let mut rpath = vec![];
    for f in link {
        if let Some(dir) = f.strip_prefix("-L") {
            println!("cargo:rustc-link-search=native={dir}");
            rpath.push(dir.to_string());
        } else if let Some(lib) = f.strip_prefix("-l") {
            println!("cargo:rustc-link-lib=dylib={lib}");
        } else if f.starts_with("-Wl,") || f == "-pthread" {
            println!("cargo:rustc-link-arg={f}");
        }
    }
    for dir in &rpath {
        println!("cargo:rustc-link-arg=-Wl,-rpath,{dir}");
    }
    // For the binaries of dependents (arl-train): DEP_ARL_MPI_RPATH.
    println!("cargo:rpath={}", rpath.join(":"));
    println!("cargo:rustc-cfg=arl_mpi");
}
