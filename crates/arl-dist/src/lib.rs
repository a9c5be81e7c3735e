//! Data-parallel training across processes: the collective operations the
//! trainer needs, behind one small trait ([`Collective`]) so that a second
//! engine (NCCL for CUDA) can be added beside the first, MPI ([`mpi`], feature
//! `mpi`, built when OpenMPI's `mpicc` is found: see `build.rs`). Also how a job is launched (`mpirun`, or `arl-train --nproc N`,
//! which starts itself under `mpirun`), and the token-balanced split of a
//! global batch among ranks ([`shard`]).
//!
//! The engine is never home-made: every byte between ranks goes through the
//! MPI library's own collectives.
pub mod grads;
#[cfg(arl_mpi)]
pub mod mpi;
pub mod zero;

use anyhow::Result;
use std::ffi::OsString;
use std::process::ExitCode;

/// Whether this build has the MPI engine (feature `mpi` and OpenMPI's
/// `mpicc` found when it was compiled).
pub const MPI: bool = cfg!(arl_mpi);

/// `ReduceOp` of [`Collective::all_reduce_f64`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ReduceOp {
    Sum,
    Max,
}

/// The collective operations of data-parallel training, on host memory.
///
/// Every rank calls the same operations in the same order. None returns an
/// error: a rank that does not arrive within the timeout, or any failure of
/// the engine, ends the whole job with a message that names the rank(s) that
/// were missing (a hang must never be silent). `what` names the operation in
/// that message.
pub trait Collective {
    fn rank(&self) -> usize;
    fn size(&self) -> usize;
    /// Element-wise sum over ranks, in place; every rank gets the result.
    fn all_reduce_sum_f32(&self, buf: &mut [f32], what: &str);
    fn all_reduce_f64(&self, buf: &mut [f64], op: ReduceOp, what: &str);
    /// `root`'s bytes to every rank; every rank passes a buffer of the same length.
    fn broadcast(&self, buf: &mut [u8], root: usize, what: &str);
    /// Whether this engine has [`Collective::all_gather_f32`] and
    /// [`Collective::reduce_scatter_f32`] (what sharding the optimizer
    /// state needs).
    fn can_shard(&self) -> bool {
        false
    }
    /// In-place all-gather: `buf` is the concatenation of every rank's part
    /// (`counts[r]` elements for rank r, in rank order); each rank fills its
    /// own part, and afterwards every rank holds all of them.
    fn all_gather_f32(&self, buf: &mut [f32], counts: &[usize], what: &str) {
        let _ = (buf, counts);
        panic!("{what}: the {} engine has no all-gather", self.engine())
    }
    /// Reduce-scatter: the element-wise sum over ranks of `buf` (laid out as
    /// in [`Collective::all_gather_f32`]), of which each rank receives only
    /// its own part, in place; the other parts of its `buf` are undefined
    /// afterwards.
    fn reduce_scatter_f32(&self, buf: &mut [f32], counts: &[usize], what: &str) {
        let _ = (buf, counts);
        panic!("{what}: the {} engine has no reduce-scatter", self.engine())
    }
    fn barrier(&self, what: &str);
    /// Seconds a collective may wait for the slowest rank (0: forever).
    fn set_timeout(&self, secs: f64);
    fn timeout(&self) -> f64;
    /// Ends every rank of the job with exit code `code`.
    fn abort(&self, code: i32) -> !;
    /// Engine name for messages and metrics.
    fn engine(&self) -> &'static str;
}

/// A world of one process: every collective is the identity.
pub struct Single;

impl Collective for Single {
    fn rank(&self) -> usize {
        0
    }
    fn size(&self) -> usize {
        1
    }
    fn all_reduce_sum_f32(&self, _: &mut [f32], _: &str) {}
    fn all_reduce_f64(&self, _: &mut [f64], _: ReduceOp, _: &str) {}
    fn broadcast(&self, _: &mut [u8], _: usize, _: &str) {}
    fn can_shard(&self) -> bool {
        true
    }
    fn all_gather_f32(&self, _: &mut [f32], _: &[usize], _: &str) {}
    fn reduce_scatter_f32(&self, _: &mut [f32], _: &[usize], _: &str) {}
    fn barrier(&self, _: &str) {}
    fn set_timeout(&self, _: f64) {}
    fn timeout(&self) -> f64 {
        0.0
    }
    fn abort(&self, code: i32) -> ! {
        std::process::exit(code)
    }
    fn engine(&self) -> &'static str {
        "none"
    }
}

/// Where this process sits in a job, from the launcher's environment.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Placement {
    pub rank: usize,
    pub size: usize,
    /// Rank among the processes of this machine (selects `cuda:N`).
    pub local_rank: usize,
    pub local_size: usize,
}

fn env_usize(key: &str) -> Option<usize> {
    std::env::var(key).ok()?.trim().parse().ok()
}

/// The placement `mpirun` (OpenMPI) gives this process, if it started it.
pub fn mpirun_placement() -> Option<Placement> {
    let size = env_usize("OMPI_COMM_WORLD_SIZE")?;
    Some(Placement {
        rank: env_usize("OMPI_COMM_WORLD_RANK").unwrap_or(0),
        size,
        local_rank: env_usize("OMPI_COMM_WORLD_LOCAL_RANK").unwrap_or(0),
        local_size: env_usize("OMPI_COMM_WORLD_LOCAL_SIZE").unwrap_or(size),
    })
}

/// Connects to the job this process belongs to: MPI under `mpirun`, else a
/// world of one. `torchrun`'s variables (`WORLD_SIZE` > 1 without `mpirun`)
/// are refused with a hint: MPI cannot form a world from them.
pub fn connect(nproc: usize, timeout_s: f64, tool: &'static str) -> Result<Box<dyn Collective>> {
    let placement = mpirun_placement();
    if placement.is_none() && env_usize("WORLD_SIZE").is_some_and(|n| n > 1) {
        return Err(arl_core::cli::hint(
            arl_core::cli::usage("`WORLD_SIZE` is set (a `torchrun` launch), which the MPI engine cannot join"),
            "start the ranks with `mpirun -n N arl-train …` or `arl-train --nproc N …`",
        ));
    }
    let Some(p) = placement.filter(|p| p.size > 1) else {
        if nproc > 1 {
            return Err(arl_core::cli::usage(format!("`--nproc {nproc}` but this process was not started by mpirun")));
        }
        return Ok(Box::new(Single));
    };
    if nproc > 1 && nproc != p.size {
        return Err(arl_core::cli::usage(format!("`--nproc {nproc}` but mpirun started {} ranks", p.size)));
    }
    open_mpi(p, timeout_s, tool)
}

#[cfg(arl_mpi)]
fn open_mpi(_: Placement, timeout_s: f64, tool: &'static str) -> Result<Box<dyn Collective>> {
    let m = mpi::Mpi::init(tool)?;
    m.set_timeout(timeout_s);
    Ok(Box::new(m))
}

#[cfg(not(arl_mpi))]
fn open_mpi(p: Placement, _: f64, _: &'static str) -> Result<Box<dyn Collective>> {
    Err(arl_core::cli::usage(format!(
        "started by mpirun as rank {} of {}, but this build has no MPI (built without OpenMPI's `mpicc`, or without feature `mpi`)",
        p.rank, p.size
    )))
}

/// `--nproc N` outside `mpirun`: runs this same command line as N ranks under
/// `mpirun` on this machine (loopback and shared memory only) and returns its
/// exit code; `None` when there is nothing to start (N = 1, or already a rank).
///
/// `mpirun` is taken from `ARL_MPIRUN`, else `PATH`. As root, OpenMPI refuses
/// to start unless `OMPI_ALLOW_RUN_AS_ROOT{,_CONFIRM}=1`; they are set here
/// for the ranks when running as root.
pub fn respawn(nproc: usize, tool: &str) -> Result<Option<ExitCode>> {
    if nproc <= 1 || mpirun_placement().is_some() {
        return Ok(None);
    }
    if !MPI {
        return Err(arl_core::cli::usage(format!("`--nproc {nproc}`: this {tool} was built without MPI (no OpenMPI `mpicc` at build time, or without feature `mpi`)")));
    }
    let exe = std::env::current_exe()?;
    let mpirun = std::env::var_os("ARL_MPIRUN").unwrap_or_else(|| OsString::from("mpirun"));
    let mut cmd = std::process::Command::new(&mpirun);
    cmd.args(["-n", &nproc.to_string(), "--oversubscribe", "--bind-to", "none"])
        // One machine: shared memory between ranks, loopback for the runtime.
        .args(["--mca", "btl", "self,vader", "--mca", "btl_vader_single_copy_mechanism", "none"])
        .args(["--mca", "oob_tcp_if_include", "lo"])
        .arg(&exe)
        .args(std::env::args_os().skip(1));
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } == 0 {
        cmd.env("OMPI_ALLOW_RUN_AS_ROOT", "1").env("OMPI_ALLOW_RUN_AS_ROOT_CONFIRM", "1");
    }
    let status = cmd.status().map_err(|e| {
        arl_core::cli::hint(
            anyhow::anyhow!("cannot start `{}`: {e}", mpirun.to_string_lossy()),
            "install OpenMPI (scripts/setup.sh: openmpi-bin), or set ARL_MPIRUN",
        )
    })?;
    let code = match status.code() {
        Some(c) => c.clamp(0, 255) as u8,
        None => 1,
    };
    Ok(Some(ExitCode::from(code)))
}

/// The input of this rank. Under a launcher only rank 0 has stdin:
/// when the input is stdin, rank 0 reads it to the end and broadcasts the
/// bytes, and every rank reads them from a private temporary file (returned,
/// removed on drop). Input files are read by every rank (on several machines
/// they must be on a shared filesystem). Only rank 0 writes `--rejects` and
/// the summary.
pub fn shared_input(
    comm: &dyn Collective,
    args: &arl_core::cli::InputSpec,
) -> Result<(arl_core::cli::InputSpec, Option<tempfile::TempDir>)> {
    let mut mine = args.clone();
    if comm.size() == 1 {
        return Ok((mine, None));
    }
    let dir = tempfile::Builder::new().prefix(".arl-rank-").tempdir()?;
    if comm.rank() != 0 {
        mine.quiet = true;
        if mine.rejects.is_some() {
            mine.rejects = Some(dir.path().join("rejects"));
        }
    }
    let stdin = args.paths.is_empty() || args.paths.iter().any(|p| p.as_os_str() == "-");
    if !stdin {
        return Ok((mine, Some(dir)));
    }
    if args.paths.len() > 1 {
        return Err(arl_core::cli::usage("with several ranks, stdin (`-`) must be the only input"));
    }
    let mut bytes = vec![];
    if comm.rank() == 0 {
        use std::io::Read;
        std::io::stdin().lock().read_to_end(&mut bytes)?;
    }
    // Reading stdin waits on whatever feeds it: no deadline for this one.
    let mut len = (bytes.len() as u64).to_le_bytes();
    let timeout = comm.timeout();
    comm.set_timeout(0.0);
    comm.broadcast(&mut len, 0, "broadcast of the input's length");
    comm.set_timeout(timeout);
    bytes.resize(u64::from_le_bytes(len) as usize, 0);
    comm.broadcast(&mut bytes, 0, "broadcast of the input");
    let path = dir.path().join("input");
    std::fs::write(&path, &bytes)?;
    mine.paths = vec![path];
    Ok((mine, Some(dir)))
}

/// Splits the samples `chunk` (indices into `lens`, the sequence lengths) of
/// one global batch among `world` ranks so that each gets about the same
/// number of tokens: longest first, each to the rank with the fewest tokens so
/// far (ties to the lower rank). Every rank computes the same split; each
/// rank's list keeps the order of `chunk`; a rank gets nothing when the batch
/// has fewer samples than ranks.
pub fn shard(chunk: &[usize], lens: &[usize], world: usize) -> Vec<Vec<usize>> {
    let world = world.max(1);
    let mut by_len: Vec<(usize, usize)> = chunk.iter().enumerate().map(|(pos, &i)| (pos, i)).collect();
    by_len.sort_by(|a, b| lens[b.1].cmp(&lens[a.1]).then(a.0.cmp(&b.0)));
    let mut load = vec![0usize; world];
    let mut owner = vec![0usize; chunk.len()];
    for (pos, i) in by_len {
        let r = (0..world).min_by_key(|&r| (load[r], r)).expect("world ≥ 1");
        load[r] += lens[i];
        owner[pos] = r;
    }
    let mut out = vec![vec![]; world];
    for (pos, &i) in chunk.iter().enumerate() {
        out[owner[pos]].push(i);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn shard_is_a_balanced_partition() {
        let mut rng = arl_core::rng::Rng::new(11);
        for _ in 0..300 {
            let n = rng.range(0, 40) as usize;
            let world = rng.range(1, 6) as usize;
            let lens: Vec<usize> = (0..n).map(|_| rng.range(1, 100) as usize).collect();
            let mut chunk: Vec<usize> = (0..n).collect();
            rng.shuffle(&mut chunk);
            let parts = shard(&chunk, &lens, world);
            assert_eq!(parts.len(), world);
            // Every sample exactly once, each part in chunk order.
            let mut all: Vec<usize> = parts.iter().flatten().copied().collect();
            all.sort();
            assert_eq!(all, (0..n).collect::<Vec<_>>());
            for p in &parts {
                let pos: Vec<usize> = p.iter().map(|i| chunk.iter().position(|c| c == i).unwrap()).collect();
                assert!(pos.windows(2).all(|w| w[0] < w[1]), "{p:?} not in chunk order");
            }
            // Greedy longest-first: no rank exceeds another by more than the longest sample.
            let loads: Vec<usize> = parts.iter().map(|p| p.iter().map(|&i| lens[i]).sum()).collect();
            let longest = lens.iter().copied().max().unwrap_or(0);
            let (lo, hi) = (loads.iter().min().unwrap(), loads.iter().max().unwrap());
            assert!(hi - lo <= longest, "{loads:?} longest {longest}");
            // Deterministic.
            assert_eq!(parts, shard(&chunk, &lens, world));
        }
    }

    #[test]
    fn shard_with_more_ranks_than_samples() {
        let parts = shard(&[2, 0], &[5, 1, 9], 3);
        assert_eq!(parts, vec![vec![2], vec![0], vec![]]);
    }
}
