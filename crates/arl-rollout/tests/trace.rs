//! `arl-rollout --trace` end to end: a traced rollout against `arl-serve`
//! (its `--scripted` TEST DOUBLE, whose per-token delay makes generation take
//! a known time) with the calculator tool and fewer request slots than
//! episodes; the trace's events checked against each other; then
//! `arl-inspect trace`: the critical path's segments add up to the measured
//! wall time of the rollout, the long tail names the slow prompt, and the
//! HTML timeline opens in headless Chromium without console errors.
use arl_testkit::common::{jsonl, run_in, tmpdir};
use arl_testkit::serve_util;

use serde_json::{json, Value};
use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Instant;

fn s(p: &Path) -> &str {
    p.to_str().unwrap()
}

/// The Chromium of the web environment's tests; the check cannot pass without it.
fn chromium() -> PathBuf {
    arl_env::web::cdp::find_chromium().unwrap_or_else(|| {
        panic!(
            "no Chromium found (chromium, chromium-browser or google-chrome on PATH, or $ARL_CHROMIUM): \
             the timeline must be opened in a browser; install it with `scripts/setup.sh --tests`"
        )
    })
}

/// Opens `page` in headless Chromium: its DOM after the scripts ran, and
/// every console message the page produced (uncaught exceptions included).
fn open_in_chromium(chromium: &Path, page: &Path) -> (String, Vec<String>) {
    let profile = tmpdir();
    let out = Command::new(chromium)
        .args([
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--disable-background-networking",
            "--disable-component-update",
            "--disable-sync",
            "--no-first-run",
            "--enable-logging=stderr",
            "--v=0",
            "--dump-dom",
        ])
        .arg(format!("--user-data-dir={}", profile.path().display()))
        .arg(format!("file://{}", page.canonicalize().unwrap().display()))
        .output()
        .unwrap_or_else(|e| panic!("cannot start `{}`: {e}", chromium.display()));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "chromium failed ({}):\n{stderr}", out.status);
    let console = stderr.lines().filter(|l| l.contains(":CONSOLE")).map(str::to_string).collect();
    (String::from_utf8_lossy(&out.stdout).into_owned(), console)
}

fn num(v: &Value, k: &str) -> f64 {
    v[k].as_f64().unwrap_or_else(|| panic!("`{k}` is not a number in {v}"))
}

/// Checks the events against each other; returns the events by type.
///
/// Long (about 80 lines) on purpose: one invariant after another over the
/// same event lists.
fn check_events(events: &[Value], concurrency: usize) -> HashMap<String, Vec<Value>> {
    let mut by: HashMap<String, Vec<Value>> = HashMap::new();
    for e in events {
        by.entry(e["type"].as_str().unwrap().to_string()).or_default().push(e.clone());
    }
    assert_eq!(events.first().unwrap()["type"], "run");
    assert_eq!(events.last().unwrap()["type"], "run_end");
    let run = &events[0];
    assert_eq!(run["version"], 1);
    assert_eq!(run["concurrency"], concurrency);
    let now = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_secs_f64();
    assert!((now - num(run, "start_unix")).abs() < 120.0, "{run}");
    assert!(run["start"].as_str().unwrap().ends_with('Z'));
    let wall = num(&by["run_end"][0], "t");
    let ready = num(&by["ready"][0], "t");

    let mut span: HashMap<u64, (f64, f64)> = HashMap::new();
    for st in &by["sample_start"] {
        let id = st["sample"].as_u64().unwrap();
        let end = by["sample_end"].iter().find(|e| e["sample"] == id).unwrap_or_else(|| panic!("no end of {id}"));
        assert!(num(st, "t") >= ready && num(end, "t") >= num(st, "t") && num(end, "t") <= wall);
        assert_eq!(
            (end["status"].as_str(), end["turns"].as_u64(), end["tool_calls"].as_u64()),
            (Some("completed"), Some(2), Some(1))
        );
        span.insert(id, (num(st, "t"), num(end, "t")));
    }
    // Requests: sent ≥ queued, answered ≥ sent, inside their sample's span;
    // never more than `concurrency` on the wire.
    let mut on_wire: Vec<(f64, i32)> = Vec::new();
    for r in &by["request"] {
        let (q, se, a) = (num(r, "queued"), num(r, "sent"), num(r, "answered"));
        assert!(se >= q && a >= se, "{r}");
        let (s0, s1) = span[&r["sample"].as_u64().unwrap()];
        assert!(q >= s0 && a <= s1, "request outside its sample: {r}");
        assert_eq!(
            (r["outcome"].as_str(), r["finish"].as_str(), r["attempt"].as_u64()),
            (Some("ok"), Some("stop"), Some(0))
        );
        assert!(r["output_tokens"].as_u64().unwrap() > 0);
        on_wire.push((se, 1));
        on_wire.push((a, -1));
    }
    on_wire.sort_by(|x, y| x.0.total_cmp(&y.0).then(x.1.cmp(&y.1)));
    let mut n = 0;
    for (_, d) in on_wire {
        n += d;
        assert!(n <= concurrency as i32, "more than {concurrency} requests on the wire");
    }
    // Tools: inside their sample's span, after the turn that called them and
    // before the next turn was queued.
    for tl in &by["tool"] {
        let id = tl["sample"].as_u64().unwrap();
        let (t0, t1) = (num(tl, "start"), num(tl, "end"));
        let (s0, s1) = span[&id];
        assert!(s0 <= t0 && t0 <= t1 && t1 <= s1, "tool outside its sample: {tl}");
        assert_eq!(
            (tl["name"].as_str(), tl["error"].as_bool(), tl["turn"].as_u64()),
            (Some("calculator"), Some(false), Some(1))
        );
        let turn = |k: u64| by["request"].iter().find(|r| r["sample"] == id && r["turn"] == k).unwrap().clone();
        assert!(num(&turn(1), "answered") <= t0 && t1 <= num(&turn(2), "queued"), "{tl}");
    }
    by
}

#[test]
fn traced_rollout_adds_up_names_its_long_tail_and_draws_a_timeline() {
    // The browser first: without it the test cannot pass.
    let chromium = chromium();
    let t = tmpdir();
    let p = t.path();
    let model = p.join("model");
    serve_util::scripted_model_dir(&model);
    let call = "<tool_call>\n{\"name\": \"calculator\", \"arguments\": {\"expression\": \"347*29\"}}\n</tool_call>";
    let script = [
        json!({"when": "SCRIPT:calc", "completion": format!("I will compute.\n{call}"), "token_delay_ms": 5}),
        json!({"when": "SCRIPT:slow", "completion": format!("{}\n{call}", "Let me think it over. ".repeat(12)), "token_delay_ms": 5}),
        json!({"when": "<tool_response>", "completion": "The answer is 10063.", "token_delay_ms": 5}),
    ];
    std::fs::write(p.join("script.jsonl"), script.iter().map(|v| v.to_string() + "\n").collect::<String>()).unwrap();
    let server = serve_util::Server::start(&["--model-path", s(&model), "--scripted", s(&p.join("script.jsonl"))]);
    // Four groups of two, two at a time (2 × concurrency episodes), on two
    // request slots: episodes wait for slots; the slow prompt runs last.
    let prompts: String = ["calc", "calc", "calc", "slow"]
        .iter()
        .enumerate()
        .map(|(i, k)| {
            json!({"id": format!("p{i}"), "prompt": format!("Task {i}. SCRIPT:{k}"), "label": "10063"}).to_string()
                + "\n"
        })
        .collect();
    std::fs::write(p.join("prompts.jsonl"), prompts).unwrap();
    let args = [
        "-i",
        "prompts.jsonl",
        "-o",
        "out.jsonl",
        "--endpoint",
        &server.url,
        "--tokenizer",
        "model",
        "-n",
        "2",
        "--concurrency",
        "2",
        "--tools",
        "calculator",
        "--max-response-len",
        "512",
        "--trace",
        "trace.jsonl",
    ];
    let t0 = Instant::now();
    let r = run_in(p, "arl-rollout", &args, b"");
    let measured = t0.elapsed().as_secs_f64();
    let r = r.ok();
    let recs = jsonl(&std::fs::read(p.join("out.jsonl")).unwrap());
    assert_eq!(recs.len(), 8, "{}", r.stderr);
    assert!(recs.iter().all(|x| x["status"] == "completed" && x["tool_calls"] == 1), "{}", r.stderr);
    assert!(!p.join("trace.jsonl.partial").exists());

    let events = jsonl(&std::fs::read(p.join("trace.jsonl")).unwrap());
    let by = check_events(&events, 2);
    assert_eq!((by["sample_start"].len(), by["request"].len(), by["tool"].len()), (8, 16, 8));
    let waited = by["request"].iter().filter(|r| num(r, "sent") - num(r, "queued") > 0.02).count();
    assert!(waited > 0, "no request waited for one of the 2 slots");

    // The summary: the critical path's segments partition the wall time,
    // which is the rollout's measured wall time within 5%.
    let r = run_in(p, "arl-inspect", &["trace", "trace.jsonl", "--json"], b"").ok();
    let sum: Value = serde_json::from_slice(&r.stdout).unwrap();
    let wall = num(&sum, "wall");
    let phases = sum["critical_path"]["phases"].as_object().unwrap();
    let total: f64 = phases.values().map(|v| v.as_f64().unwrap()).sum();
    assert!((total - wall).abs() < 1e-6 * wall.max(1.0), "{sum:#}");
    assert!((total - measured).abs() <= 0.05 * measured, "segments {total:.3} s, measured {measured:.3} s: {sum:#}");
    // Most of it is accounted for by what the rollout waits on, not by gaps.
    let ph = |k: &str| phases.get(k).and_then(Value::as_f64).unwrap_or(0.0);
    let named = ph("generation") + ph("tools") + ph("waiting_for_slot") + ph("waiting_to_start");
    assert!(named >= 0.75 * wall, "{sum:#}");
    assert!(ph("generation") > 0.0, "{sum:#}");
    assert!(sum["totals"]["waiting_for_slot"].as_f64().unwrap() > 0.02, "{sum:#}");
    // The slow prompt is the critical path and the long tail; among the
    // slowest samples (by duration: others may be as slow, waiting for the
    // slots it holds) its two spent the most time generating.
    assert_eq!(sum["critical_path"]["sample"]["prompt_id"], "p3", "{sum:#}");
    assert!(sum["long_tail"]["samples"].as_array().unwrap().iter().all(|x| x.as_str().unwrap().starts_with("p3#")));
    let mut slowest: Vec<&Value> = sum["slowest"].as_array().unwrap().iter().collect();
    slowest.sort_by(|a, b| num(&b["phases"], "generation").total_cmp(&num(&a["phases"], "generation")));
    let top2: Vec<&str> = slowest.iter().take(2).map(|x| x["prompt_id"].as_str().unwrap()).collect();
    assert_eq!(top2, ["p3", "p3"], "{sum:#}");

    // The text summary and the page.
    let r = run_in(p, "arl-inspect", &["trace", "trace.jsonl", "-o", "timeline.html"], b"").ok();
    let text = r.stdout_str();
    assert!(text.contains("critical path: sample p3#"), "{text}");
    assert!(text.contains("long tail: 90% of the samples had finished at"), "{text}");
    assert!(text.lines().any(|l| l.trim_start().starts_with("total") && l.contains("100.0%")), "{text}");
    let page = std::fs::read_to_string(p.join("timeline.html")).unwrap();
    assert!(!page.contains("src=") && !page.contains("href=\"http") && !page.contains("url("), "fetches something");

    // In the browser: the script ran to its end and nothing was logged. The
    // same check on a page with an error must see it (or it proves nothing).
    std::fs::write(
        p.join("broken.html"),
        "<!DOCTYPE html><html><body><script>'use strict'; noSuchFunction();</script></body></html>",
    )
    .unwrap();
    let broken = std::thread::spawn({
        let (c, b) = (chromium.clone(), p.join("broken.html"));
        move || open_in_chromium(&c, &b)
    });
    let (dom, console) = open_in_chromium(&chromium, &p.join("timeline.html"));
    assert!(console.is_empty(), "console messages:\n{}", console.join("\n"));
    assert!(dom.contains("data-timeline=\"ready\""), "the page's script did not finish");
    assert!(dom.matches("class=\"p-gen\"").count() >= 2 * 16, "bars missing");
    let (_, console) = broken.join().unwrap();
    assert!(console.iter().any(|l| l.contains("Uncaught ReferenceError")), "{console:?}");
}
