//! Data-parallel `arl-train` on the real engine (OpenMPI, `--nproc 2` on
//! this machine) with the tiny model: two ranks give the same weights as one
//! process on the same global batch (token-mean and seq-mean-token-mean),
//! resume works with another number of ranks, and a rank that dies or hangs
//! stops the job within the timeout with that rank named, leaving the last
//! checkpoint intact.
#![cfg(feature = "mpi")]
use arl_testkit::{common, tiny};

use common::{exe, jsonl, run_in, tmpdir};
use serde_json::{json, Value};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

fn tiny() -> PathBuf {
    tiny::model()
}

/// Records of uneven lengths (so the two ranks' shards hold different token
/// counts) with partly masked responses (so token-mean and
/// seq-mean-token-mean differ).
fn records(n: usize) -> String {
    tiny::jsonl_text((0..n).map(|i| {
        let resp = format!("answer {}!{}", i * 7, "xy".repeat(if i % 4 == 0 { 15 } else { i % 4 }));
        let (mut r, len) = tiny::record(i, &resp);
        let mask: Vec<u8> = (0..len).map(|t| u8::from(i % 3 != 0 || t % 4 != 1)).collect();
        r["loss_mask"] = json!(mask);
        r["advantages"] = json!(vec![(i % 3) as f32 - 1.0; len]);
        r["rollout_log_probs"] = json!(vec![-4.0 - (i % 2) as f32; len]);
        r
    }))
}

fn train(dir: &Path, args: &[&str], input: &str) -> common::Run {
    tiny::train(dir, &[&["--collective-timeout", "60"], args].concat(), input)
}

fn weights(dir: &Path) -> Vec<(String, Vec<f32>)> {
    tensors(&dir.join("model.safetensors"))
}

/// Every float32 tensor of a safetensors file, by name.
fn tensors(path: &Path) -> Vec<(String, Vec<f32>)> {
    let bytes = std::fs::read(path).unwrap();
    let st = safetensors::SafeTensors::deserialize(&bytes).unwrap();
    let mut out: Vec<(String, Vec<f32>)> = st
        .tensors()
        .into_iter()
        .map(|(name, v)| {
            assert_eq!(v.dtype(), safetensors::Dtype::F32, "{name}");
            (name, v.data().chunks_exact(4).map(|b| f32::from_le_bytes(b.try_into().unwrap())).collect())
        })
        .collect();
    out.sort_by(|a, b| a.0.cmp(&b.0));
    out
}

/// Largest absolute difference between two checkpoints' weights.
fn max_diff(a: &Path, b: &Path) -> f32 {
    let (wa, wb) = (weights(a), weights(b));
    assert_eq!(wa.len(), wb.len());
    let mut m = 0f32;
    for ((na, va), (nb, vb)) in wa.iter().zip(&wb) {
        assert_eq!(na, nb);
        assert_eq!(va.len(), vb.len(), "{na}");
        for (x, y) in va.iter().zip(vb) {
            m = m.max((x - y).abs());
        }
    }
    m
}

fn metrics(path: &Path) -> Vec<Value> {
    jsonl(&std::fs::read(path).unwrap())
}

/// 1 process vs `--nproc 2` on the same global batches, 3 optimizer steps.
fn two_ranks_match_one(agg: &str, extra: &[&str], stdin: bool) {
    let t = tmpdir();
    let input = records(12);
    std::fs::write(t.path().join("in.jsonl"), &input).unwrap();
    let m = tiny();
    let go = |save: &str, nproc: &str| {
        let mut a = vec!["--model", m.to_str().unwrap(), "--save", save, "--metrics"];
        let mpath = format!("{save}.jsonl");
        a.push(&mpath);
        a.extend_from_slice(&["--loss-agg", agg, "--global-batch-size", "4", "--shuffle", "--lr", "2e-4"]);
        a.extend_from_slice(&["--save-dtype", "float32", "--nproc", nproc]);
        a.extend_from_slice(extra);
        if stdin {
            train(t.path(), &a, &input).ok();
        } else {
            a.extend_from_slice(&["-i", "in.jsonl"]);
            train(t.path(), &a, "").ok();
        }
        metrics(&t.path().join(mpath))
    };
    let one = go("one", "1");
    let two = go("two", "2");
    assert_eq!(one.len(), 3);
    assert_eq!(two.len(), 3);
    for (a, b) in one.iter().zip(&two) {
        assert_eq!(a["world_size"], 1);
        assert_eq!(b["world_size"], 2);
        // Global counts, not one rank's.
        assert_eq!(a["tokens"], b["tokens"]);
        assert_eq!(a["trained_tokens"], b["trained_tokens"]);
        for k in ["loss", "grad_norm", "entropy", "clipfrac", "ratio_max"] {
            let (x, y) = (a[k].as_f64().unwrap(), b[k].as_f64().unwrap());
            assert!((x - y).abs() <= 1e-5 * x.abs().max(1.0), "{k}: {x} vs {y}");
        }
        assert!(b["allreduce_s"].as_f64().unwrap() > 0.0);
    }
    let d = max_diff(&t.path().join("one"), &t.path().join("two"));
    let moved = max_diff(&t.path().join("one"), &m);
    eprintln!("{agg}: 1 vs 2 ranks max |Δw| = {d:e}, training moved weights by up to {moved:e}");
    assert!(d <= 1e-5, "weights differ by {d}");
    assert!(moved > 1e-4, "training barely moved the weights ({moved}): the comparison would prove nothing");
}

#[test]
fn two_ranks_equal_one_process_token_mean() {
    two_ranks_match_one("token-mean", &[], false);
}

#[test]
fn two_ranks_equal_one_process_seq_mean_token_mean_from_stdin() {
    // Old log-probs recomputed on the ranks' shares (all-reduced), input on stdin
    // (only rank 0 has it; it is broadcast).
    two_ranks_match_one("seq-mean-token-mean", &["--recompute-old-logprobs"], true);
}

/// The moments of a checkpoint's optimizer state, by name.
fn optimizer_state(dir: &Path) -> Vec<(String, Vec<f32>)> {
    tensors(&dir.join("trainer_state").join("optimizer.safetensors"))
}

/// ZeRO stages 1 and 2 on 2 ranks against one process: same weights, same
/// metrics, the same (whole) optimizer state in the checkpoint, and each
/// rank holding half the state. Small buckets at stage 2, so that buckets
/// cut through parameters and every rank owns pieces of many.
#[test]
fn zero_stages_equal_one_process() {
    let t = tmpdir();
    std::fs::write(t.path().join("in.jsonl"), records(12)).unwrap();
    let m = tiny();
    let go = |save: &str, extra: &[&str]| {
        let mpath = format!("{save}.jsonl");
        let mut a = vec!["--model", m.to_str().unwrap(), "--save", save, "--metrics", &mpath, "-i", "in.jsonl"];
        a.extend_from_slice(&["--global-batch-size", "4", "--shuffle", "--lr", "2e-4", "--save-dtype", "float32"]);
        // Clipping active (the norms here are ~0.15), so the shards' partial norms must add up.
        a.extend_from_slice(&["--clip-grad", "0.05", "--weight-decay", "0.1"]);
        a.extend_from_slice(extra);
        train(t.path(), &a, "").ok();
        metrics(&t.path().join(mpath))
    };
    let one = go("one", &[]);
    let z1 = go("z1", &["--nproc", "2", "--zero-stage", "1"]);
    let z2 = go("z2", &["--nproc", "2", "--zero", "2", "--allreduce-bucket-mb", "0.01"]);
    assert_eq!(one.len(), 3);
    let whole = one[0]["optimizer_state_bytes"].as_f64().unwrap();
    for (name, z) in [("z1", &z1), ("z2", &z2)] {
        assert_eq!(z.len(), 3);
        for (a, b) in one.iter().zip(z) {
            assert_eq!(b["world_size"], 2);
            for k in ["loss", "grad_norm", "entropy", "clipfrac"] {
                let (x, y) = (a[k].as_f64().unwrap(), b[k].as_f64().unwrap());
                assert!((x - y).abs() <= 1e-5 * x.abs().max(1.0), "{name} {k}: {x} vs {y}");
            }
            assert!(a["grad_norm"].as_f64().unwrap() > 0.05, "clipping never happened: {a}");
            let per_rank = b["optimizer_state_bytes"].as_f64().unwrap();
            eprintln!("{name}: optimizer state per rank {per_rank} bytes, one process {whole}");
            assert!((per_rank / (whole / 2.0) - 1.0).abs() <= 0.05, "{name}: {per_rank} per rank vs {whole} whole");
            assert!(b["allgather_s"].as_f64().unwrap() > 0.0);
        }
        let d = max_diff(&t.path().join("one"), &t.path().join(name));
        eprintln!("{name}: max |Δw| vs one process = {d:e}");
        assert!(d <= 1e-5, "{name}: weights differ by {d}");
        // The checkpoint's optimizer state is whole and equal.
        let (so, sz) = (optimizer_state(&t.path().join("one")), optimizer_state(&t.path().join(name)));
        assert_eq!(so.len(), sz.len(), "{name}: optimizer state tensors");
        for ((na, va), (nb, vb)) in so.iter().zip(&sz) {
            assert_eq!((na, va.len()), (nb, vb.len()));
            let d = va.iter().zip(vb).map(|(x, y)| (x - y).abs()).fold(0f32, f32::max);
            let scale = va.iter().map(|x| x.abs()).fold(0f32, f32::max);
            assert!(d <= 1e-5 * scale.max(1e-6) + 1e-12, "{name} {na}: differs by {d} (scale {scale})");
        }
    }
    assert!(max_diff(&t.path().join("one"), &m) > 1e-4, "training barely moved the weights");
}

/// bf16 weights with fp32 masters: the sharded masters and moments give
/// exactly what plain data parallelism gives (one process differs from both
/// by bf16 rounding of differently grouped gradients, so DDP is the reference).
#[test]
fn zero_with_bf16_masters_equals_data_parallel() {
    let t = tmpdir();
    std::fs::write(t.path().join("in.jsonl"), records(8)).unwrap();
    let m = tiny();
    let go = |save: &str, stage: &str| {
        let mut a = vec!["--model", m.to_str().unwrap(), "--save", save, "-i", "in.jsonl", "--nproc", "2"];
        a.extend_from_slice(&["--loss", "sft", "--lr", "1e-3", "--precision", "bf16", "--save-dtype", "float32"]);
        a.extend_from_slice(&["--global-batch-size", "4", "--zero-stage", stage, "--allreduce-bucket-mb", "0.01"]);
        train(t.path(), &a, "").ok();
    };
    go("ddp", "0");
    go("z1", "1");
    let (d, z) = (t.path().join("ddp"), t.path().join("z1"));
    assert_eq!(max_diff(&d, &z), 0.0, "weights");
    let (od, oz) = (optimizer_state(&d), optimizer_state(&z));
    assert_eq!(od.len(), oz.len());
    assert!(od.iter().any(|(n, _)| n.starts_with("master.")), "no fp32 masters saved");
    assert_eq!(od, oz, "optimizer state (moments and masters)");
    assert!(max_diff(&d, &m) > 1e-3, "training barely moved the weights");
}

#[test]
fn zero_needs_several_ranks() {
    let t = tmpdir();
    let m = tiny();
    let r = train(t.path(), &["--model", m.to_str().unwrap(), "--zero-stage", "1"], &records(2));
    assert_eq!(r.code, 2, "{}", r.stderr);
    assert!(r.stderr.contains("--zero-stage 1") && r.stderr.contains("--nproc"), "{}", r.stderr);
    let r = train(t.path(), &["--model", m.to_str().unwrap(), "--zero-stage", "3", "--nproc", "2"], &records(2));
    assert_eq!(r.code, 2, "{}", r.stderr);
}

#[test]
fn resume_with_another_number_of_ranks() {
    let t = tmpdir();
    let input = records(8);
    std::fs::write(t.path().join("in.jsonl"), &input).unwrap();
    let m = tiny();
    let go = |model: &Path, save: &str, nproc: &str, extra: &[&str]| {
        let mut a = vec!["--model", model.to_str().unwrap(), "--save", save, "-i", "in.jsonl", "--nproc", nproc];
        a.extend_from_slice(&["--loss", "sft", "--lr", "1e-3", "--global-batch-size", "4", "--save-dtype", "float32"]);
        a.extend_from_slice(extra);
        train(t.path(), &a, "").ok();
    };
    // 4 steps in one process; 2 steps on 2 ranks then 2 resumed in 1; and the reverse.
    go(&m, "straight", "1", &["--epochs", "2"]);
    go(&m, "two-first", "2", &[]);
    go(&t.path().join("two-first"), "then-one", "1", &["--resume"]);
    go(&m, "one-first", "1", &[]);
    go(&t.path().join("one-first"), "then-two", "2", &["--resume"]);
    // A ZeRO checkpoint is whole: it resumes in one process, and a whole one resumes sharded.
    go(&m, "zero-first", "2", &["--zero-stage", "1"]);
    go(&t.path().join("zero-first"), "then-one-z", "1", &["--resume"]);
    go(&t.path().join("one-first"), "then-zero", "2", &["--resume", "--zero-stage", "2"]);
    let straight = t.path().join("straight");
    for resumed in ["then-one", "then-two", "then-one-z", "then-zero"] {
        let d = max_diff(&straight, &t.path().join(resumed));
        assert!(d <= 1e-5, "{resumed}: weights differ by {d}");
        let st: Value = serde_json::from_str(
            &std::fs::read_to_string(t.path().join(resumed).join("trainer_state/state.json")).unwrap(),
        )
        .unwrap();
        assert_eq!(st["step"], 4, "{resumed}");
    }
}

/// A running `arl-train --nproc 2` job whose ranks carry a marker in their
/// environment, so that the test finds its own processes (and no one else's).
struct Job {
    child: std::process::Child,
    marker: String,
}

impl Job {
    fn start(dir: &Path, extra: &[&str]) -> Job {
        let marker = format!("{}", dir.display());
        std::fs::write(dir.join("in.jsonl"), records(12)).unwrap();
        let child = Command::new(exe("arl-train"))
            .arg("--model")
            .arg(tiny())
            .args(["-i", "in.jsonl"])
            .args(["--save", "ck", "--save-interval", "5", "--metrics", "m.jsonl", "--global-batch-size", "4"])
            .args(["--lr", "1e-4", "--epochs", "100000", "--threads", "1", "-q", "--nproc", "2", "--precision", "fp32"])
            .args(extra)
            .current_dir(dir)
            .env("ARL_TEST_JOB", &marker)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        Job { child, marker }
    }

    /// Pid of this job's rank `r`.
    fn rank_pid(&self, r: usize) -> Option<i32> {
        for e in std::fs::read_dir("/proc").ok()?.flatten() {
            let Ok(pid) = e.file_name().to_string_lossy().parse::<i32>() else {
                continue;
            };
            let Ok(env) = std::fs::read(e.path().join("environ")) else {
                continue;
            };
            let vars: Vec<&[u8]> = env.split(|&b| b == 0).collect();
            let has = |kv: &str| vars.contains(&kv.as_bytes());
            if has(&format!("ARL_TEST_JOB={}", self.marker)) && has(&format!("OMPI_COMM_WORLD_RANK={r}")) {
                return Some(pid);
            }
        }
        None
    }

    /// Waits until rank 0 has written `steps` metrics lines and a checkpoint.
    fn wait_for_steps(&self, dir: &Path, steps: usize) {
        let t0 = Instant::now();
        loop {
            // Complete lines only: rank 0 may be writing one.
            let n = std::fs::read(dir.join("m.jsonl")).map(|b| b.iter().filter(|&&c| c == b'\n').count()).unwrap_or(0);
            if n >= steps && dir.join("ck/trainer_state/state.json").exists() {
                return;
            }
            assert!(t0.elapsed() < Duration::from_secs(120), "the job made no progress ({n} steps)");
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    /// Exit code, stderr and seconds until the job ended (killed after `limit`).
    fn wait(mut self, limit: Duration) -> (Option<i32>, String, f64) {
        let t0 = Instant::now();
        let status = loop {
            if let Some(s) = self.child.try_wait().unwrap() {
                break Some(s);
            }
            if t0.elapsed() > limit {
                break None;
            }
            std::thread::sleep(Duration::from_millis(50));
        };
        let secs = t0.elapsed().as_secs_f64();
        if status.is_none() {
            for r in 0..2 {
                if let Some(p) = self.rank_pid(r) {
                    // SAFETY: signals a process of this test's job.
                    unsafe { libc::kill(p, libc::SIGKILL) };
                }
            }
            let _ = self.child.kill();
        }
        let out = self.child.wait_with_output().unwrap();
        (status.and_then(|s| s.code()), String::from_utf8_lossy(&out.stderr).into_owned(), secs)
    }
}

/// The checkpoint under `ck` loads and scores, and its step is one that was saved.
fn assert_checkpoint_intact(dir: &Path) {
    let st: Value =
        serde_json::from_str(&std::fs::read_to_string(dir.join("ck/trainer_state/state.json")).unwrap()).unwrap();
    let step = st["step"].as_u64().unwrap();
    assert!(step > 0 && step.is_multiple_of(5), "checkpoint step {step}");
    let r = run_in(dir, "arl-train", &["logprobs", "--model", "ck", "--threads", "1"], records(2).as_bytes());
    assert_eq!(r.code, 0, "the last checkpoint does not load: {}", r.stderr);
    assert_eq!(jsonl(&r.stdout).len(), 2);
}

#[test]
fn killing_a_rank_mid_step_stops_the_job_and_names_it() {
    let t = tmpdir();
    let job = Job::start(t.path(), &["--collective-timeout", "10"]);
    job.wait_for_steps(t.path(), 7);
    let pid = job.rank_pid(1).expect("rank 1 running");
    // SAFETY: rank 1 of this test's job.
    unsafe { libc::kill(pid, libc::SIGKILL) };
    let (code, stderr, secs) = job.wait(Duration::from_secs(30));
    eprintln!("job ended {secs:.1} s after the kill; stderr:\n{stderr}");
    assert!(code.is_some(), "the job still ran 30 s after rank 1 was killed");
    assert!(secs < 10.0 + 5.0, "took {secs} s");
    assert_ne!(code, Some(0));
    assert!(stderr.contains("rank 1"), "the lost rank is not named:\n{stderr}");
    assert_checkpoint_intact(t.path());
}

#[test]
fn a_hung_rank_is_named_within_the_collective_timeout() {
    let t = tmpdir();
    let job = Job::start(t.path(), &["--collective-timeout", "3"]);
    job.wait_for_steps(t.path(), 7);
    let pid = job.rank_pid(1).expect("rank 1 running");
    // SAFETY: rank 1 of this test's job: stopped, as a hang.
    unsafe { libc::kill(pid, libc::SIGSTOP) };
    let (code, stderr, secs) = job.wait(Duration::from_secs(30));
    // MPI_Abort kills the stopped rank too; make sure of it.
    // SAFETY: as above.
    unsafe { libc::kill(pid, libc::SIGKILL) };
    eprintln!("job ended {secs:.1} s after the stop; stderr:\n{stderr}");
    assert!(code.is_some(), "the job still hung 30 s after rank 1 stopped");
    // Timeout, then at most 1 s asking the peers, then the abort.
    assert!(secs < 3.0 + 1.0 + 5.0, "took {secs} s");
    assert_ne!(code, Some(0));
    assert!(stderr.contains("rank 1 did not arrive"), "{stderr}");
    assert!(stderr.contains("did not complete within 3 s"), "{stderr}");
    assert_checkpoint_intact(t.path());
}

#[test]
fn torchrun_variables_alone_are_refused() {
    let t = tmpdir();
    let out = Command::new(exe("arl-train"))
        .args(["--model", tiny().to_str().unwrap(), "--threads", "1", "-q"])
        .current_dir(t.path())
        .env("WORLD_SIZE", "2")
        .env("RANK", "0")
        .stdin(Stdio::null())
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(stderr.contains("torchrun") && stderr.contains("--nproc"), "{stderr}");
}

/// A LoRA adapter trained on 2 ranks, with and without ZeRO, equals one
/// process: the gradients summed and the optimizer sharded are the
/// adapter's alone (the frozen base has none).
#[test]
fn lora_on_two_ranks_equals_one_process() {
    let t = tmpdir();
    std::fs::write(t.path().join("in.jsonl"), records(12)).unwrap();
    let m = tiny();
    let go = |save: &str, extra: &[&str]| {
        let mpath = format!("{save}.jsonl");
        let mut a = vec!["--model", m.to_str().unwrap(), "--save", save, "--metrics", &mpath, "-i", "in.jsonl"];
        a.extend_from_slice(&["--global-batch-size", "4", "--shuffle", "--lr", "1e-2", "--clip-grad", "0.05"]);
        a.extend_from_slice(&["--lora-rank", "4", "--lora-targets", "all-linear"]);
        a.extend_from_slice(extra);
        train(t.path(), &a, "").ok();
        metrics(&t.path().join(mpath))
    };
    let one = go("one", &[]);
    let two = go("two", &["--nproc", "2"]);
    let z1 = go("z1", &["--nproc", "2", "--zero-stage", "1"]);
    let adapter = |d: &str| tensors(&t.path().join(d).join("adapter_model.safetensors"));
    let a1 = adapter("one");
    let moved = a1.iter().filter(|(n, _)| n.contains("lora_B")).flat_map(|(_, v)| v).fold(0f32, |m, x| m.max(x.abs()));
    assert!(moved > 1e-4, "the adapter barely moved ({moved})");
    for (name, ms) in [("two", &two), ("z1", &z1)] {
        for (a, b) in one.iter().zip(ms) {
            for k in ["loss", "grad_norm"] {
                let (x, y) = (a[k].as_f64().unwrap(), b[k].as_f64().unwrap());
                assert!((x - y).abs() <= 1e-5 * x.abs().max(1.0), "{name} {k}: {x} vs {y}");
            }
        }
        let d = a1
            .iter()
            .zip(adapter(name))
            .flat_map(|((na, va), (nb, vb))| {
                assert_eq!(na, &nb);
                va.iter().zip(vb).map(|(x, y)| (x - y).abs()).collect::<Vec<_>>()
            })
            .fold(0f32, f32::max);
        eprintln!("lora {name}: max |Δ| vs one process = {d:e}");
        assert!(d <= 1e-5, "{name}: adapters differ by {d}");
    }
    let (whole, half) =
        (one[0]["optimizer_state_bytes"].as_f64().unwrap(), z1[0]["optimizer_state_bytes"].as_f64().unwrap());
    assert!((half / (whole / 2.0) - 1.0).abs() <= 0.05, "{half} per rank vs {whole}");
}
