//! `scripts/device-check.sh`, the one call that runs arl's CUDA path on a
//! lent GPU (docs/device.md), in its CPU dry run on every `make test` so it
//! never rots: the same code (arl-train's log-probs against transformers on
//! the tiny models, RL steps beside PyTorch's, arl-serve beside `generate`)
//! on the CPU, float32, at tiny shapes. And its two ways of failing: a probe
//! that stops at once where there is no GPU, and, when arl's binaries do not
//! load, a PyTorch half that still reports under a failed verdict.
use arl_testkit::common::{exe, require_python, root, tmpdir};
use serde_json::Value;
use std::path::Path;
use std::process::{Command, Output};

fn check(args: &[&str], bin: &Path, out: &Path) -> Output {
    Command::new("bash")
        .arg(root().join("scripts/device-check.sh"))
        .args(args)
        .arg("--bin")
        .arg(bin)
        .arg("--out")
        .arg(out)
        .env("ARL_PYTHON", require_python())
        .env_remove("OUT")
        .output()
        .expect("bash")
}

fn results(out: &Path) -> Value {
    let p = out.join("device-check.json");
    serde_json::from_slice(&std::fs::read(&p).unwrap_or_else(|e| panic!("{}: {e}", p.display()))).unwrap()
}

fn rows<'a>(v: &'a Value, check: &str) -> Vec<&'a Value> {
    v["rows"].as_array().unwrap().iter().filter(|r| r["check"] == check).collect()
}

/// The number in a cell such as `2,681 tok/s` or `max abs Δ 4.8e-07`.
fn number(cell: &Value) -> f64 {
    let s = cell.as_str().unwrap_or_else(|| panic!("not a measured cell: {cell}"));
    let word = s.split_whitespace().find(|w| w.chars().next().is_some_and(|c| c.is_ascii_digit())).unwrap();
    word.replace(',', "").parse().unwrap_or_else(|e| panic!("{s}: {e}"))
}

#[test]
fn dry_run_passes_every_check_on_the_cpu() {
    let t = tmpdir();
    let bin = exe("arl-train").parent().unwrap().to_path_buf();
    let o = check(&["--dry-run"], &bin, t.path());
    let (stdout, stderr) = (String::from_utf8_lossy(&o.stdout), String::from_utf8_lossy(&o.stderr));
    assert!(o.status.success(), "{stdout}\n{stderr}");
    assert!(
        stdout.contains("| check | what | arl | PyTorch | note |") && stdout.contains("verdict: PASSED"),
        "{stdout}"
    );
    let v = results(t.path());
    assert_eq!(
        (v["mode"].as_str(), v["passed"].as_bool(), v["complete"].as_bool()),
        (Some("dry-run"), Some(true), Some(true))
    );
    assert!(v["machine"]["cpu"].as_str().is_some_and(|c| !c.is_empty()), "{}", v["machine"]);
    assert_eq!(rows(&v, "load").len(), 2);
    // Every tiny family, each within tolerance of transformers.
    let logits = rows(&v, "logits");
    assert_eq!(logits.len(), 4, "{logits:?}");
    for r in &logits {
        let d = number(&r["arl"]);
        assert!(d < 1e-4, "{r}");
    }
    // Both halves measured the RL steps and the generation.
    let tps = rows(&v, "rl step").into_iter().find(|r| r["what"] == "tokens/s").expect("tokens/s row").clone();
    assert!(number(&tps["arl"]) > 0.0 && number(&tps["pytorch"]) > 0.0, "{tps}");
    let generate = rows(&v, "generate");
    assert!(number(&generate[0]["arl"]) > 0.0 && number(&generate[0]["pytorch"]) > 0.0, "{generate:?}");
    // The table also lands beside the JSON.
    let md = std::fs::read_to_string(t.path().join("device-check.md")).unwrap();
    assert_eq!(md.trim(), stdout.trim());
}

#[test]
fn binaries_that_do_not_load_leave_the_pytorch_half() {
    let t = tmpdir();
    // No arl-train or arl-serve there: both fail to start.
    let empty = t.path().join("no-binaries");
    std::fs::create_dir(&empty).unwrap();
    let out = t.path().join("out");
    let o = check(&["--dry-run"], &empty, &out);
    let stdout = String::from_utf8_lossy(&o.stdout);
    assert_eq!(o.status.code(), Some(1), "{stdout}\n{}", String::from_utf8_lossy(&o.stderr));
    assert!(stdout.contains("verdict: FAILED"), "{stdout}");
    let v = results(&out);
    assert_eq!(v["passed"], false);
    assert!(rows(&v, "load").iter().all(|r| r["ok"] == false && r["arl"] == "failed"), "{v}");
    for r in rows(&v, "logits") {
        assert!(r["arl"].is_null() && r["pytorch"].as_str().is_some_and(|s| s.ends_with("log-probs")), "{r}");
    }
    let tps = rows(&v, "rl step").into_iter().find(|r| r["what"] == "tokens/s").expect("tokens/s row").clone();
    assert!(tps["arl"].is_null() && number(&tps["pytorch"]) > 0.0, "{tps}");
    assert!(rows(&v, "generate").iter().any(|r| r["pytorch"].as_str().is_some_and(|s| s.ends_with("tok/s"))), "{v}");
}

#[test]
fn the_probe_stops_at_once_without_a_gpu() {
    // This machine has no GPU (CI's neither): the GPU mode must refuse
    // before any check. Where a GPU is present the probe passes instead.
    if Command::new("nvidia-smi").arg("-L").output().is_ok_and(|o| o.status.success()) {
        return;
    }
    let t = tmpdir();
    let bin = exe("arl-train").parent().unwrap().to_path_buf();
    let o = check(&[], &bin, t.path());
    let stderr = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(3), "{stderr}");
    assert!(stderr.contains("PROBE FAILED"), "{stderr}");
    assert!(!t.path().join("device-check.json").exists());
}
