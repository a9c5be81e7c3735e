//! The MPI engine of [`Collective`]: OpenMPI through the C shim
//! csrc/arl_mpi.c (built by build.rs with `mpicc`'s flags, feature `mpi`).
//!
//! Collectives are MPI's non-blocking ones, waited on with a deadline
//! (`--collective-timeout`). When it passes, the shim asks every peer which
//! collective it is in; those that do not answer (hung, stopped, still
//! computing) or are behind are named in the error, and `MPI_Abort` ends
//! every rank. A rank that dies is noticed by `mpirun`, which ends the job
//! and names that rank itself.
use super::{Collective, ReduceOp};
use anyhow::{bail, Result};
use std::cell::Cell;
use std::os::raw::{c_double, c_int, c_void};

extern "C" {
    fn arl_mpi_init(rank: *mut c_int, size: *mut c_int) -> c_int;
    fn arl_mpi_finalize() -> c_int;
    fn arl_mpi_abort(code: c_int);
    fn arl_mpi_allreduce(
        buf: *mut c_void,
        count: c_int,
        dtype: c_int,
        op: c_int,
        timeout_s: c_double,
        missing: *mut c_int,
        nmissing: *mut c_int,
    ) -> c_int;
    fn arl_mpi_bcast(
        buf: *mut c_void,
        count: c_int,
        root: c_int,
        timeout_s: c_double,
        missing: *mut c_int,
        nmissing: *mut c_int,
    ) -> c_int;
    fn arl_mpi_allgatherv(
        buf: *mut f32,
        counts: *const c_int,
        displs: *const c_int,
        timeout_s: c_double,
        missing: *mut c_int,
        nmissing: *mut c_int,
    ) -> c_int;
    fn arl_mpi_reduce_scatter(
        buf: *mut f32,
        counts: *const c_int,
        displs: *const c_int,
        timeout_s: c_double,
        missing: *mut c_int,
        nmissing: *mut c_int,
    ) -> c_int;
    fn arl_mpi_barrier(timeout_s: c_double, missing: *mut c_int, nmissing: *mut c_int) -> c_int;
    fn arl_mpi_seq() -> c_int;
}

/// Elements per MPI call (MPI counts are C ints).
const MAX_COUNT: usize = 1 << 30;

/// Exit code of a job ended by a collective that timed out.
pub const EXIT_TIMEOUT: i32 = 1;

/// MPI_COMM_WORLD of this process; finalised on drop.
pub struct Mpi {
    rank: usize,
    size: usize,
    timeout: Cell<f64>,
    tool: &'static str,
}

impl Mpi {
    /// `MPI_Init_thread` (funneled: only the main thread calls MPI).
    pub fn init(tool: &'static str) -> Result<Mpi> {
        let (mut rank, mut size) = (0, 0);
        // SAFETY: the out-pointers are valid; MPI_Init is called at most once.
        if unsafe { arl_mpi_init(&mut rank, &mut size) } != 0 {
            bail!("MPI_Init_thread failed");
        }
        Ok(Mpi { rank: rank as usize, size: size as usize, timeout: Cell::new(0.0), tool })
    }

    /// Turns the shim's result into success or the end of the job.
    fn check(&self, rc: c_int, missing: &[c_int], nmissing: c_int, what: &str) {
        match rc {
            0 => {}
            1 => {
                let lost: Vec<String> = missing[..nmissing.max(0) as usize].iter().map(|r| r.to_string()).collect();
                let who = match lost.len() {
                    0 => "every rank answered, yet the operation did not complete".to_string(),
                    1 => format!("rank {} did not arrive (dead, hung or still computing)", lost[0]),
                    _ => format!("ranks {} did not arrive (dead, hung or still computing)", lost.join(", ")),
                };
                // SAFETY: reads a counter.
                let seq = unsafe { arl_mpi_seq() };
                eprintln!(
                    "{}: error: rank {}: {what} (collective #{seq}) did not complete within {} s\n  caused by: {who}\nhint: \
                     the job is aborted; raise `--collective-timeout` if a rank is only slow",
                    self.tool,
                    self.rank,
                    self.timeout.get()
                );
                self.abort(EXIT_TIMEOUT)
            }
            _ => {
                eprintln!(
                    "{}: error: rank {}: {what}: bad arguments to the MPI shim (code {rc})",
                    self.tool, self.rank
                );
                self.abort(1)
            }
        }
    }

    fn allreduce_raw(&self, ptr: *mut c_void, count: usize, dtype: c_int, op: c_int, what: &str) {
        let mut missing = vec![0 as c_int; self.size];
        let mut n = 0;
        // SAFETY: `ptr` points to `count` elements of `dtype`, exclusively borrowed by the caller.
        let rc = unsafe {
            arl_mpi_allreduce(ptr, count as c_int, dtype, op, self.timeout.get(), missing.as_mut_ptr(), &mut n)
        };
        self.check(rc, &missing, n, what);
    }

    /// Runs one of the shim's in-place float32 v-collectives (`f`: all-gather
    /// or reduce-scatter) over `buf`, laid out in rank order by `counts`.
    fn v_collective(&self, f: VCollective, buf: &mut [f32], counts: &[usize], what: &str) {
        assert_eq!(counts.len(), self.size, "{what}: one count per rank");
        assert_eq!(counts.iter().sum::<usize>(), buf.len(), "{what}: counts do not cover the buffer");
        assert!(buf.len() <= MAX_COUNT, "{what}: {} elements in one call", buf.len());
        let c: Vec<c_int> = counts.iter().map(|&n| n as c_int).collect();
        let d: Vec<c_int> = counts
            .iter()
            .scan(0, |off, &n| {
                let at = *off;
                *off += n as c_int;
                Some(at)
            })
            .collect();
        let mut missing = vec![0 as c_int; self.size];
        let mut n = 0;
        // SAFETY: `buf` holds sum(counts) float32 elements, exclusively
        // borrowed; `c` and `d` have one entry per rank.
        let rc =
            unsafe { f(buf.as_mut_ptr(), c.as_ptr(), d.as_ptr(), self.timeout.get(), missing.as_mut_ptr(), &mut n) };
        self.check(rc, &missing, n, what);
    }
}

/// The shim's signature of an in-place float32 v-collective.
type VCollective =
    unsafe extern "C" fn(*mut f32, *const c_int, *const c_int, c_double, *mut c_int, *mut c_int) -> c_int;

impl Collective for Mpi {
    fn can_shard(&self) -> bool {
        true
    }
    fn all_gather_f32(&self, buf: &mut [f32], counts: &[usize], what: &str) {
        self.v_collective(arl_mpi_allgatherv, buf, counts, what);
    }
    fn reduce_scatter_f32(&self, buf: &mut [f32], counts: &[usize], what: &str) {
        self.v_collective(arl_mpi_reduce_scatter, buf, counts, what);
    }
    fn rank(&self) -> usize {
        self.rank
    }
    fn size(&self) -> usize {
        self.size
    }
    fn all_reduce_sum_f32(&self, buf: &mut [f32], what: &str) {
        for part in buf.chunks_mut(MAX_COUNT) {
            self.allreduce_raw(part.as_mut_ptr().cast(), part.len(), 0, 0, what);
        }
    }
    fn all_reduce_f64(&self, buf: &mut [f64], op: ReduceOp, what: &str) {
        let op = match op {
            ReduceOp::Sum => 0,
            ReduceOp::Max => 1,
        };
        for part in buf.chunks_mut(MAX_COUNT) {
            self.allreduce_raw(part.as_mut_ptr().cast(), part.len(), 1, op, what);
        }
    }
    fn broadcast(&self, buf: &mut [u8], root: usize, what: &str) {
        for part in buf.chunks_mut(MAX_COUNT) {
            let mut missing = vec![0 as c_int; self.size];
            let mut n = 0;
            // SAFETY: `part` is a valid, exclusively borrowed byte buffer.
            let rc = unsafe {
                arl_mpi_bcast(
                    part.as_mut_ptr().cast(),
                    part.len() as c_int,
                    root as c_int,
                    self.timeout.get(),
                    missing.as_mut_ptr(),
                    &mut n,
                )
            };
            self.check(rc, &missing, n, what);
        }
    }
    fn barrier(&self, what: &str) {
        let mut missing = vec![0 as c_int; self.size];
        let mut n = 0;
        // SAFETY: valid out-pointers.
        let rc = unsafe { arl_mpi_barrier(self.timeout.get(), missing.as_mut_ptr(), &mut n) };
        self.check(rc, &missing, n, what);
    }
    fn set_timeout(&self, secs: f64) {
        self.timeout.set(secs.max(0.0));
    }
    fn timeout(&self) -> f64 {
        self.timeout.get()
    }
    fn abort(&self, code: i32) -> ! {
        // SAFETY: ends the process (MPI_Abort, else _exit).
        unsafe { arl_mpi_abort(code) };
        std::process::exit(code)
    }
    fn engine(&self) -> &'static str {
        "mpi"
    }
}

impl Drop for Mpi {
    fn drop(&mut self) {
        // SAFETY: MPI was initialised by `init`; nothing calls MPI after this.
        unsafe { arl_mpi_finalize() };
    }
}
