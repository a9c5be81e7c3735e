//! `arl-rollout --router` through the real sgl-router (PyPI `sglang-router`,
//! installed by `scripts/setup.sh`) in front of two `arl-serve` workers
//! (scripted test doubles, so that which requests are slow is known).
use arl_testkit::common;
use arl_testkit::serve_util;

use arl_testkit::daemon::Daemon;
use common::{jsonl, run_in, tmpdir};
use serde_json::{json, Value};
use serve_util::{scripted_model_dir, Server};
use std::process::Command;
use std::time::Duration;

/// sgl-router, and its URL.
struct Router {
    _daemon: Daemon,
    url: String,
}

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port()
}

/// Starts sgl-router (round robin) over `workers` and waits until it lists them healthy.
fn start_router(workers: &[&str]) -> Router {
    let py = common::require_python();
    let ok = Command::new(&py).args(["-c", "import sglang_router"]).status().is_ok_and(|s| s.success());
    assert!(ok, "`sglang_router` is not installed in {}: run `make setup`", py.display());
    let port = free_port();
    let mut args: Vec<String> =
        ["-m", "sglang_router.launch_router", "--host", "127.0.0.1", "--policy", "round_robin", "--log-level", "warn"]
            .iter()
            .map(|s| s.to_string())
            .collect();
    // Its Prometheus exporter would take port 29000: another free one instead.
    args.extend(["--port".to_string(), port.to_string(), "--prometheus-port".to_string(), free_port().to_string()]);
    args.push("--worker-urls".to_string());
    args.extend(workers.iter().map(|w| w.to_string()));
    let url = format!("http://127.0.0.1:{port}");
    let healthy = || {
        serve_util::client()
            .get(format!("{url}/workers"))
            .send()
            .ok()
            .and_then(|x| x.json::<Value>().ok())
            .map_or(0, |v| v["workers"].as_array().map_or(0, |a| a.iter().filter(|w| w["is_healthy"] == true).count()))
    };
    let mut cmd = Command::new(&py);
    cmd.args(&args);
    let daemon = Daemon::start_polling("sgl-router", &mut cmd, Duration::from_secs(90), || healthy() == workers.len());
    Router { _daemon: daemon, url }
}

fn info(s: &Server) -> Value {
    serve_util::client().get(format!("{}/get_server_info", s.url)).send().unwrap().json().unwrap()
}

#[test]
fn rollout_through_the_real_sgl_router_completes_and_aborts_reach_both_workers() {
    let t = tmpdir();
    let model = t.path().join("model");
    scripted_model_dir(&model);
    // "slow" completions take 400 × 25 ms = 10 s unless aborted.
    let slow = "z".repeat(400);
    let script = [
        json!({"when": "SCRIPT:plain", "completion": "The answer is 4."}),
        json!({"when": "SCRIPT:slow", "completion": slow, "token_delay_ms": 25}),
    ];
    let sf = t.path().join("script.jsonl");
    std::fs::write(&sf, script.iter().map(|v| v.to_string() + "\n").collect::<String>()).unwrap();
    let (m, s) = (model.to_str().unwrap(), sf.to_str().unwrap());
    let w1 = Server::start(&["--model-path", m, "--scripted", s]);
    let w2 = Server::start(&["--model-path", m, "--scripted", s]);
    let router = start_router(&[&w1.url, &w2.url]);

    // Plain prompts only: every sample through the router, both workers used.
    let prompts = |kinds: &[&str]| -> String {
        kinds
            .iter()
            .enumerate()
            .map(|(i, k)| {
                json!({"id": format!("p{i}"), "prompt": format!("Task {i}. SCRIPT:{k}"), "label": "x"}).to_string()
                    + "\n"
            })
            .collect()
    };
    let r = run_in(
        t.path(),
        "arl-rollout",
        &["--router", &router.url, "--tokenizer", m, "-n", "2", "--max-response-len", "64"],
        prompts(&["plain"; 4]).as_bytes(),
    )
    .ok();
    let recs = jsonl(&r.stdout);
    assert_eq!(recs.len(), 8, "{}", r.stderr);
    assert!(
        recs.iter().all(|x| x["response"].as_str().is_some_and(|r| r.starts_with("The answer is 4."))
            && x["finish_reason"] == "stop"),
        "{}",
        r.stdout_str()
    );
    let (g1, g2) =
        (info(&w1)["arl_generate_calls"].as_u64().unwrap(), info(&w2)["arl_generate_calls"].as_u64().unwrap());
    assert_eq!(g1 + g2, 8);
    assert!(g1 > 0 && g2 > 0, "round robin used one worker only: {g1} / {g2}");

    // Two of four groups wanted: the slow ones are aborted on every worker
    // the router lists (it does not forward /abort_request itself).
    let r = run_in(
        t.path(),
        "arl-rollout",
        &["--router", &router.url, "--tokenizer", m, "-n", "2", "--max-response-len", "512", "--target-groups", "2"],
        prompts(&["plain", "slow", "plain", "slow"]).as_bytes(),
    )
    .ok();
    let recs = jsonl(&r.stdout);
    let mut ids: Vec<String> = recs.iter().map(|x| x["prompt_id"].as_str().unwrap().to_string()).collect();
    ids.sort();
    ids.dedup();
    assert_eq!(ids, vec!["p0", "p2"], "{}", r.stderr);
    let (a1, a2) = (info(&w1)["arl_abort_calls"].as_u64().unwrap(), info(&w2)["arl_abort_calls"].as_u64().unwrap());
    assert!(a1 > 0 && a2 > 0, "aborts reached {a1} / {a2} times");
    // The aborted requests stopped: nothing left running on either worker
    // (unaborted, they would run for 10 s more).
    for w in [&w1, &w2] {
        let load: Value = serve_util::client().get(format!("{}/get_load", w.url)).send().unwrap().json().unwrap();
        let running = load.get("num_running_reqs").or_else(|| load[0].get("num_running_reqs")).and_then(Value::as_u64);
        assert_eq!(running, Some(0), "{load}");
    }
}
