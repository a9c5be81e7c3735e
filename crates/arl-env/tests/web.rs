//! The web environment through the real binaries and a real headless
//! Chromium, all on loopback: `arl-env` serving the task site, `arl-tasks
//! web --with-solutions` → `arl-reward --rm web` replaying the reference
//! browser calls (reward 1; broken ones 0 with a reason), `arl-rollout --web`
//! driving the browser from a scripted `arl-serve` and from the tiny random
//! model, and the browser's isolation: a page that tries to reach another
//! loopback port gets nothing through (the listener there sees no connection).
//!
//! Every test skips, saying so, when no Chromium is installed
//! (scripts/setup.sh installs Debian's `chromium`; CI runs it).
use arl_testkit::common;
use arl_testkit::serve_util;

use arl_env::web::{cdp, Session};
use common::{jsonl, run, run_in};
use serde_json::{json, Value};
use std::io::{Read, Write};
use std::net::TcpListener;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

fn chromium() -> Option<std::path::PathBuf> {
    let c = cdp::find_chromium();
    if c.is_none() {
        eprintln!("SKIPPED: no Chromium installed (chromium, chromium-browser or google-chrome on PATH, or $ARL_CHROMIUM); scripts/setup.sh installs it");
    }
    c
}

/// A running `arl-env --port 0`, killed on drop.
use common::{prompts_of, to_jsonl, EnvServer as Env};

fn tasks(n: &str, level: &str, seed: &str) -> Vec<Value> {
    jsonl(
        &run("arl-tasks", &["web", "-n", n, "--difficulty", level, "--seed", seed, "--with-solutions", "-q"], b"")
            .ok()
            .stdout,
    )
}

fn score(env: &Env, recs: &[Value]) -> Vec<Value> {
    jsonl(&run("arl-reward", &["--rm", "web", "--web", &env.url, "-q"], &to_jsonl(recs)).ok().stdout)
}

fn http() -> reqwest::blocking::Client {
    arl_http::client::blocking_builder().timeout(Duration::from_secs(10)).build().unwrap()
}

#[test]
fn web_reference_solutions_reach_reward_one_in_the_browser() {
    if chromium().is_none() {
        return;
    }
    let env = Env::start(&[]);
    let recs = tasks("9", "4", "3");
    let kinds: std::collections::BTreeSet<&str> =
        recs.iter().map(|r| r["metadata"]["kind"].as_str().unwrap()).collect();
    assert_eq!(kinds.len(), 3, "every kind of task: {kinds:?}");
    // Broken copies: the last call (the submit) left out, or another value typed/selected.
    let mut broken = Vec::new();
    for r in &recs {
        let resp = r["response"].as_str().unwrap();
        let mut calls: Vec<&str> = resp.split("</tool_call>\n").collect();
        let done = calls.pop().unwrap();
        let last = calls.pop().unwrap();
        let mut b = r.clone();
        b["response"] = json!(format!("{}</tool_call>\n{done}", calls.join("</tool_call>\n")));
        assert!(last.contains("\"click\""), "{last}");
        broken.push(b);
    }
    let mut all = recs.clone();
    all.extend(broken);
    let scored = score(&env, &all);
    assert_eq!(scored.len(), 18);
    for r in &scored[..9] {
        let d = &r["reward_detail"];
        assert_eq!(r["reward"], 1.0, "{} {d}", r["response"]);
        assert_eq!(d["mode"], "replayed");
        assert_eq!(d["call_errors"], 0, "{d}");
        // The replay episode is gone once scored.
        let code = http()
            .get(format!("{}/web/episodes/{}", env.url, d["episode_id"].as_str().unwrap()))
            .send()
            .unwrap()
            .status()
            .as_u16();
        assert_eq!(code, 404);
    }
    for r in &scored[9..] {
        assert_eq!(r["reward"], 0.0, "{}", r["reward_detail"]);
        let why = r["reward_detail"]["reason"].as_str().unwrap();
        assert!(
            why.contains("no sign-up") || why.contains("wishlist holds []") || why.contains("0 orders placed"),
            "{why}"
        );
    }
    // A demonstration with another name typed fails with the field named.
    let signup = recs.iter().find(|r| r["metadata"]["kind"] == "signup").unwrap();
    let name = signup["label"]["signup"]["name"].as_str().unwrap();
    let mut wrong = signup.clone();
    wrong["response"] = json!(signup["response"].as_str().unwrap().replace(name, "Someone Else"));
    let out = score(&env, &[wrong]);
    assert_eq!(out[0]["reward"], 0.0);
    assert!(out[0]["reward_detail"]["reason"].as_str().unwrap().contains("`name`"), "{}", out[0]["reward_detail"]);
}

/// A plain HTTP server on loopback answering every request with `page`,
/// counting the requests whose first line contains `probe`.
fn serve_page(page: String, probe: &'static str) -> (String, Arc<AtomicUsize>) {
    let l = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = l.local_addr().unwrap().to_string();
    let hits = Arc::new(AtomicUsize::new(0));
    let h = hits.clone();
    std::thread::spawn(move || {
        for c in l.incoming() {
            let Ok(mut c) = c else { continue };
            let mut buf = vec![0u8; 8192];
            let n = c.read(&mut buf).unwrap_or(0);
            let head = String::from_utf8_lossy(&buf[..n]).to_string();
            if head.lines().next().unwrap_or("").contains(probe) {
                h.fetch_add(1, Ordering::SeqCst);
            }
            let body = if head.starts_with("GET /favicon") { String::new() } else { page.clone() };
            let _ = write!(
                c,
                "HTTP/1.1 200 OK\r\nContent-Type: text/html\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
                body.len()
            );
        }
    });
    (addr, hits)
}

/// One browser for several episodes: the actions and observation on the
/// task site, a fresh context per episode, and isolation from every other
/// loopback port (fetch, image, iframe, WebSocket, script navigation, a
/// clicked link, `open` of another URL).
#[test]
fn browser_actions_contexts_and_isolation() {
    let Some(chromium) = chromium() else { return };
    // The listener no page may reach.
    let secret = TcpListener::bind("127.0.0.1:0").unwrap();
    let secret_port = secret.local_addr().unwrap().port();
    secret.set_nonblocking(true).unwrap();
    let s = format!("http://127.0.0.1:{secret_port}");
    let page = format!(
        "<!doctype html><title>Probe</title><p>Hello</p><a id=l href=\"{s}/link\">away</a><img src=\"{s}/img.png\"><iframe src=\"{s}/frame\"></iframe>\
         <script>fetch('{s}/fetch').catch(() => 0); fetch('/same-origin-probe').catch(() => 0);\
         try {{ new WebSocket('ws://127.0.0.1:{secret_port}/ws'); }} catch (e) {{}}\
         navigator.sendBeacon && navigator.sendBeacon('{s}/beacon', 'x');\
         setTimeout(() => {{ if (location.search === '?go') location.href = '{s}/nav'; }}, 50);</script>"
    );
    let (task_addr, same_origin_hits) = serve_page(page, "same-origin-probe");
    let env = Env::start(&[]);
    let b = cdp::Browser::launch(&cdp::LaunchOpts {
        chromium,
        allow: vec![task_addr.clone(), env.hostport()],
        timeout: Duration::from_secs(15),
    })
    .expect("launch");
    assert!(b.version().unwrap().contains("Chrome"), "{:?}", b.version());

    // Isolation.
    let sess = Session::new(b.new_page().unwrap(), &format!("http://{task_addr}"), "probe", 4000);
    let o = sess.act("open", &json!({"url": "/x"}));
    assert!(!o.error && o.text.contains("Title: Probe") && o.text.contains("[1] link \"away\""), "{}", o.text);
    std::thread::sleep(Duration::from_millis(500));
    assert!(same_origin_hits.load(Ordering::SeqCst) >= 1, "the page's scripts ran and reached the task server");
    let reached = |secret: &TcpListener| match secret.accept() {
        Ok((_, peer)) => panic!("a page reached the other loopback port (from {peer})"),
        Err(e) => assert_eq!(e.kind(), std::io::ErrorKind::WouldBlock),
    };
    reached(&secret);
    let o = sess.act("open", &json!({"url": "/x?go"}));
    assert!(!o.error, "{}", o.text);
    std::thread::sleep(Duration::from_millis(300));
    reached(&secret);
    // (The script's navigation ended on the refusing proxy's answer.) The
    // link leads there too, not to the listener.
    assert!(!sess.act("open", &json!({"url": "/x"})).error);
    let o = sess.act("click", &json!({"id": 1}));
    assert!(o.text.contains("blocked: only the task site is reachable"), "{}", o.text);
    let refused = sess.act("open", &json!({"url": format!("{s}/open")}));
    assert!(refused.error && refused.text.contains("only this task's site"), "{}", refused.text);
    for u in ["file:///etc/passwd", "/../../other", "chrome://version"] {
        assert!(sess.act("open", &json!({"url": u})).error, "{u}");
    }
    std::thread::sleep(Duration::from_millis(500));
    assert!(same_origin_hits.load(Ordering::SeqCst) >= 2);
    reached(&secret);
    drop(sess);

    // The task site: a sign-up through the actions, in a fresh context.
    let id: Value = http().post(format!("{}/web/episodes", env.url)).json(&json!({"setup": {"products": [{"sku": "K1", "name": "Steel kettle", "category": "kitchen", "price": 2500}]}})).send().unwrap().json().unwrap();
    let ep = id["episode_id"].as_str().unwrap();
    let sess = Session::new(b.new_page().unwrap(), &env.url, ep, 4000);
    assert_eq!(b.contexts().unwrap(), 1, "the probe's context was disposed");
    let o = sess.act("open", &json!({"url": "/"}));
    assert!(o.text.contains("URL: /\n") && o.text.contains("[4] link \"Create an account\""), "{}", o.text);
    let o = sess.act("click", &json!({"id": 4}));
    assert!(o.text.contains("URL: /signup"), "{}", o.text);
    assert!(
        o.text.contains("[4] textbox \"name\" value=\"\"")
            && o.text.contains("[6] select \"plan\" options: \"Free\", \"Pro\", \"Team\" selected=\"Free\""),
        "{}",
        o.text
    );
    let o = sess.act("type", &json!({"id": 4, "text": "Ada Lind"}));
    assert!(o.text.contains("value=\"Ada Lind\""), "{}", o.text);
    assert!(sess.act("select", &json!({"id": 6, "value": "team"})).text.contains("selected=\"Team\""));
    let bad = sess.act("select", &json!({"id": 6, "value": "Gold"}));
    assert!(bad.error && bad.text.contains("\"Pro\""), "{}", bad.text);
    assert!(sess.act("type", &json!({"id": 6, "text": "x"})).error, "a drop-down is not a text input");
    assert!(sess.act("click", &json!({"id": 99})).text.contains("no element [99]"));
    let o = sess.act("click", &json!({"id": 8}));
    assert!(o.text.contains("(checked)"), "{}", o.text);
    let o = sess.act("click", &json!({"id": 9}));
    assert!(o.text.contains("Thank you, Ada Lind. Your Team plan is active."), "{}", o.text);
    let o = sess.act("back", &json!({}));
    assert!(o.text.contains("URL: /signup"), "{}", o.text);
    let st: Value = http().get(format!("{}/web/episodes/{ep}", env.url)).send().unwrap().json().unwrap();
    assert_eq!(
        st["signups"],
        json!([{"name": "Ada Lind", "email": "", "plan": "Team", "country": "Austria", "newsletter": true}])
    );
    // Search with Enter, and the cap on the observation.
    let o = sess.act("open", &json!({"url": "search"}));
    let o2 = sess.act("type", &json!({"id": 4, "text": "kettle", "press_enter": true}));
    assert!(
        o2.text.contains("URL: /search?q=kettle") && o2.text.contains("[6] link \"Steel kettle\""),
        "{}\n{}",
        o.text,
        o2.text
    );
    let small = Session::new(b.new_page().unwrap(), &env.url, ep, 40);
    let o = small.act("open", &json!({"url": "/"}));
    assert!(o.text.contains("more characters; scroll down"), "{}", o.text);
    assert!(small.act("scroll", &json!({"direction": "sideways"})).error);
    assert!(!small.act("scroll", &json!({"direction": "down"})).error);
}

/// tasks → arl-rollout --web (a scripted `arl-serve` answering each task
/// with its reference calls) → arl-reward --rm web on the recorded episodes.
#[test]
fn rollout_with_browser_tools_records_episodes_and_reaches_goals() {
    if chromium().is_none() {
        return;
    }
    let env = Env::start(&[]);
    let d = common::tmpdir();
    let p = d.path();
    serve_util::scripted_model_dir(&p.join("model"));
    let recs = tasks("3", "2", "5");
    let prompts = prompts_of(&recs);
    std::fs::write(p.join("tasks.jsonl"), to_jsonl(&prompts)).unwrap();
    // Turn 1: all the reference calls at once; turn 2 (after the pages): done.
    let mut scripts: Vec<String> = recs
        .iter()
        .map(|r| {
            json!({"when": r["prompt"], "completion": r["response"].as_str().unwrap().trim_end_matches("Done.")})
                .to_string()
        })
        .collect();
    scripts.push(json!({"when": "<tool_response>", "completion": "Done."}).to_string());
    std::fs::write(p.join("script.jsonl"), scripts.join("\n")).unwrap();
    let server = serve_util::Server::start(&[
        "--model-path",
        p.join("model").to_str().unwrap(),
        "--scripted",
        p.join("script.jsonl").to_str().unwrap(),
    ]);
    run_in(
        p,
        "arl-rollout",
        &[
            "-q",
            "-i",
            "tasks.jsonl",
            "--endpoint",
            &server.url,
            "--tokenizer",
            "model",
            "--web",
            &env.url,
            "--web-max-chars",
            "1500",
            "--max-turns",
            "3",
            "--max-response-len",
            "60000",
            "-n",
            "2",
            "-o",
            "roll.jsonl",
        ],
        b"",
    )
    .ok();
    let rolled = jsonl(&std::fs::read(p.join("roll.jsonl")).unwrap());
    assert_eq!(rolled.len(), 6);
    let mut ids = std::collections::HashSet::new();
    for r in &rolled {
        assert!(r["tool_calls"].as_u64().unwrap() >= 4, "{r}");
        assert_eq!(r["metadata"]["tool_errors"], 0, "{}", r["response"]);
        assert_eq!(r["status"], "completed");
        assert!(ids.insert(r["metadata"]["episode_id"].as_str().unwrap().to_string()), "one episode per sample");
        let pl = r["prompt_len"].as_u64().unwrap() as usize;
        let toks: Vec<u8> = r["tokens"].as_array().unwrap()[..pl]
            .iter()
            .filter_map(|x| x.as_u64().filter(|t| *t < 256).map(|t| t as u8))
            .collect();
        assert!(String::from_utf8_lossy(&toks).contains("\"name\": \"click\""), "the browser tools are offered");
        // The pages are in the masked (tool) tokens.
        let mask: Vec<u64> = r["loss_mask"].as_array().unwrap().iter().map(|x| x.as_u64().unwrap()).collect();
        let resp = &r["tokens"].as_array().unwrap()[pl..];
        let masked: Vec<u8> = resp
            .iter()
            .zip(&mask)
            .filter(|(t, m)| **m == 0 && t.as_u64().unwrap() < 256)
            .map(|(t, _)| t.as_u64().unwrap() as u8)
            .collect();
        let masked = String::from_utf8_lossy(&masked);
        assert!(masked.contains("Title: ") && masked.contains("[1] link \"Home\""), "{masked}");
    }
    let scored = score(&env, &rolled);
    for r in &scored {
        assert_eq!(r["reward"], 1.0, "{} {}", r["reward_detail"], r["response"]);
        assert_eq!(r["reward_detail"]["mode"], "recorded");
    }
    // arl-inspect show renders the episode's actions and pages.
    std::fs::write(p.join("scored.jsonl"), to_jsonl(&scored)).unwrap();
    let shown = run_in(p, "arl-inspect", &["show", "-i", "scored.jsonl", "--index", "0"], b"").ok().stdout_str();
    assert!(shown.contains("web episode") && shown.contains("→ open(") && shown.contains("Title: "), "{shown}");
}

/// The tiny random model through `arl-serve` → `arl-rollout --web` →
/// `arl-reward --rm web`: whatever it does, every trajectory is well formed
/// and scored with a reason.
#[test]
fn web_environment_on_the_tiny_model() {
    if chromium().is_none() {
        return;
    }
    let env = Env::start(&[]);
    let d = common::tmpdir();
    let p = d.path();
    let cfg = std::path::Path::new(concat!(env!("CARGO_MANIFEST_DIR"), "/../..")).join("scripts/golden/tiny.json");
    run_in(p, "arl-train", &["make-tokenizer", "--out", "tok"], b"").ok();
    run_in(
        p,
        "arl-train",
        &["init", "--config", cfg.to_str().unwrap(), "--tokenizer", "tok", "--out", "m", "--seed", "4"],
        b"",
    )
    .ok();
    let server = serve_util::Server::start(&["--model-path", p.join("m").to_str().unwrap(), "--cpu-threads", "1"]);
    run_in(p, "arl-tasks", &["web", "-n", "2", "-o", "web.jsonl"], b"").ok();
    run_in(
        p,
        "arl-rollout",
        &[
            "-q",
            "--endpoint",
            &server.url,
            "--tokenizer",
            "m",
            "-n",
            "2",
            "--max-turns",
            "2",
            "--max-response-len",
            "24",
            "--temperature",
            "1.0",
            "-i",
            "web.jsonl",
            "--web",
            &env.url,
            "-o",
            "roll.jsonl",
        ],
        b"",
    )
    .ok();
    // Records without an episode (no browser call) are replayed: their
    // (absent or garbled) calls run in the browser too.
    run_in(p, "arl-reward", &["-q", "--rm", "auto", "--web", &env.url, "-i", "roll.jsonl", "-o", "scored.jsonl"], b"")
        .ok();
    let recs = jsonl(&std::fs::read(p.join("scored.jsonl")).unwrap());
    assert_eq!(recs.len(), 4);
    for r in &recs {
        let pl = r["prompt_len"].as_u64().unwrap() as usize;
        let toks = r["tokens"].as_array().unwrap();
        assert_eq!(toks.len(), pl + r["loss_mask"].as_array().unwrap().len());
        let prompt: String =
            toks[..pl].iter().map(|t| t.as_u64().unwrap()).filter(|t| *t < 128).map(|t| t as u8 as char).collect();
        assert!(prompt.contains("\"name\": \"select\""), "browser tools not offered in {prompt}");
        let reward = r["reward"].as_f64().expect("reward");
        assert!(reward == 0.0 || reward == 1.0);
        assert!(r["reward_detail"]["reason"].is_string(), "{}", r["reward_detail"]);
    }
}
