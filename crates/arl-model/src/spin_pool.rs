//! A process-wide pool of worker threads that run one job split into parts,
//! for kernels called hundreds of times a second on a few microseconds of
//! work each (a decode step's matrix-vector products, [`crate::gemv`]).
//!
//! Starting a scoped thread costs some 10-20 µs, more than such a kernel
//! takes. Here the workers stay alive: after a job they spin on a
//! generation counter for [`SPIN`] (a decode step's other ops, between two
//! of its matrix products, take less), then sleep on a condition variable
//! until the next job. The caller runs part 0 itself and waits for the
//! others. One job at a time: a second caller meanwhile (two engines in one
//! process) runs its parts itself, one after the other.
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Condvar, Mutex, OnceLock};
use std::time::{Duration, Instant};

/// How long an idle worker spins before it sleeps.
pub const SPIN: Duration = Duration::from_micros(300);

type Job = &'static (dyn Fn(usize) + Sync);

struct Shared {
    /// Bumped once per job; a worker runs a job when it sees a new value.
    generation: AtomicU64,
    /// The current job and its number of parts (set before the bump).
    job: Mutex<Option<(Job, usize)>>,
    /// Workers finished with the current generation.
    done: AtomicUsize,
    panicked: AtomicBool,
    /// Workers asleep, and their wake-up.
    sleeping: Mutex<usize>,
    wake: Condvar,
}

pub struct Pool {
    shared: Arc<Shared>,
    workers: usize,
    busy: Mutex<()>,
}

impl Pool {
    /// The process's pool: one worker fewer than the machine has cores
    /// (at most 31), started on first use.
    pub fn global() -> &'static Pool {
        static POOL: OnceLock<Pool> = OnceLock::new();
        POOL.get_or_init(|| {
            let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
            Pool::new(cores.clamp(1, 32) - 1)
        })
    }

    fn new(workers: usize) -> Pool {
        let shared = Arc::new(Shared {
            generation: AtomicU64::new(0),
            job: Mutex::new(None),
            done: AtomicUsize::new(0),
            panicked: AtomicBool::new(false),
            sleeping: Mutex::new(0),
            wake: Condvar::new(),
        });
        for w in 1..=workers {
            let sh = Arc::clone(&shared);
            std::thread::Builder::new()
                .name(format!("arl-pool-{w}"))
                .spawn(move || worker(&sh, w))
                .expect("starting a pool thread");
        }
        Pool { shared, workers, busy: Mutex::new(()) }
    }

    /// Most parts a job runs at once (the workers and the caller).
    pub fn width(&self) -> usize {
        self.workers + 1
    }

    /// Runs `f(0)`, …, `f(parts − 1)`, at most [`Pool::width`] parts (more
    /// are not run: the caller asks for at most that many), part 0 on this
    /// thread, and returns when all are done. A panic in a part is raised here.
    pub fn run(&self, parts: usize, f: &(dyn Fn(usize) + Sync)) {
        let parts = parts.min(self.width());
        let guard = if parts > 1 { self.busy.try_lock().ok() } else { None };
        let Some(_guard) = guard else {
            (0..parts).for_each(f);
            return;
        };
        let sh = &*self.shared;
        // SAFETY: the workers call the job only between the generation bump
        // below and their `done` increment, and this function waits for
        // every worker's increment before it returns (and clears the job):
        // `f` outlives every use.
        let job: Job = unsafe { std::mem::transmute::<&(dyn Fn(usize) + Sync), Job>(f) };
        *sh.job.lock().expect("pool job") = Some((job, parts));
        sh.done.store(0, Ordering::Release);
        sh.generation.fetch_add(1, Ordering::SeqCst);
        if *sh.sleeping.lock().expect("pool sleepers") > 0 {
            sh.wake.notify_all();
        }
        let mine = catch_unwind(AssertUnwindSafe(|| f(0)));
        while sh.done.load(Ordering::Acquire) < self.workers {
            std::hint::spin_loop();
        }
        *sh.job.lock().expect("pool job") = None;
        if let Err(p) = mine {
            std::panic::resume_unwind(p);
        }
        if sh.panicked.swap(false, Ordering::AcqRel) {
            panic!("a pool thread's part panicked");
        }
    }
}

/// A pointer the parts of one [`Pool::run`] job share, each writing its own
/// disjoint range of what it points to (the caller's promise).
pub(crate) struct SyncPtr<T>(*mut T);

// SAFETY: the parts write disjoint ranges (the constructor's caller promises
// it), and `run` returns only when every part is done.
unsafe impl<T> Sync for SyncPtr<T> {}

impl<T> SyncPtr<T> {
    pub(crate) fn new(p: *mut T) -> SyncPtr<T> {
        SyncPtr(p)
    }

    pub(crate) fn get(&self) -> *mut T {
        self.0
    }
}

fn worker(sh: &Shared, me: usize) {
    let mut seen = 0u64;
    loop {
        let start = Instant::now();
        let mut spins = 0u32;
        loop {
            let g = sh.generation.load(Ordering::Acquire);
            if g != seen {
                seen = g;
                break;
            }
            spins = spins.wrapping_add(1);
            if spins.is_multiple_of(256) && start.elapsed() > SPIN {
                let mut n = sh.sleeping.lock().expect("pool sleepers");
                *n += 1;
                while sh.generation.load(Ordering::Acquire) == seen {
                    n = sh.wake.wait(n).expect("pool sleepers");
                }
                *n -= 1;
            }
            std::hint::spin_loop();
        }
        let job = *sh.job.lock().expect("pool job");
        if let Some((f, parts)) = job {
            if me < parts && catch_unwind(AssertUnwindSafe(|| f(me))).is_err() {
                sh.panicked.store(true, Ordering::Release);
            }
        }
        sh.done.fetch_add(1, Ordering::AcqRel);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_part_runs_once_per_job_awake_or_asleep() {
        let pool = Pool::new(3);
        for round in 0..200u64 {
            let hits: Vec<AtomicUsize> = (0..4).map(|_| AtomicUsize::new(0)).collect();
            let parts = 1 + (round % 4) as usize;
            pool.run(parts, &|i| {
                hits[i].fetch_add(1, Ordering::Relaxed);
            });
            for (i, h) in hits.iter().enumerate() {
                assert_eq!(h.load(Ordering::Relaxed), usize::from(i < parts), "round {round}, part {i}");
            }
            if round % 50 == 0 {
                // Long enough for the workers to fall asleep.
                std::thread::sleep(SPIN * 4);
            }
        }
    }

    #[test]
    fn a_panicking_part_is_raised_to_the_caller_and_the_pool_goes_on() {
        let pool = Pool::new(1);
        let r = catch_unwind(AssertUnwindSafe(|| pool.run(2, &|i| assert!(i == 0, "part {i} fails"))));
        assert!(r.is_err());
        let n = AtomicUsize::new(0);
        pool.run(2, &|_| {
            n.fetch_add(1, Ordering::Relaxed);
        });
        assert_eq!(n.load(Ordering::Relaxed), 2);
    }
}
