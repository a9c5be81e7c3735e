//! The database and API environments end to end on the tiny test model:
//! `arl-serve` serving a randomly initialised model made here, `arl-tasks sql|api`
//! → `arl-rollout` with the `sql` tool or the `arl-env` OpenAPI tools (their
//! definitions rendered into the system turn) → `arl-reward --rm sql|api`.
//! The random policy rarely calls a tool; every trajectory must still be well
//! formed, scored, with the reason in `reward_detail`. (Episodes that do call
//! the tools, with their masking, are checked in `arl-env`'s tests (sql.rs, api.rs)
//! against the scripted server.)
use arl_testkit::common;
use arl_testkit::serve_util;

use common::{jsonl, run_in};
use serde_json::Value;
use std::path::Path;

fn s(p: &Path) -> &str {
    p.to_str().unwrap()
}

fn check(recs: &[Value], tool: &str, n: usize) {
    assert_eq!(recs.len(), n);
    for r in recs {
        let pl = r["prompt_len"].as_u64().unwrap() as usize;
        let toks = r["tokens"].as_array().unwrap();
        let mask = r["loss_mask"].as_array().unwrap();
        assert_eq!(toks.len(), pl + mask.len());
        assert_eq!(r["rollout_log_probs"].as_array().unwrap().len(), mask.len());
        for (m, lp) in mask.iter().zip(r["rollout_log_probs"].as_array().unwrap()) {
            if m == 0 {
                assert_eq!(lp.as_f64(), Some(0.0));
            }
        }
        let prompt: String =
            toks[..pl].iter().map(|t| t.as_u64().unwrap()).filter(|t| *t < 128).map(|t| t as u8 as char).collect();
        assert!(prompt.contains(&format!("\"name\": \"{tool}\"")), "tool `{tool}` not offered in {prompt}");
        let reward = r["reward"].as_f64().expect("reward");
        assert!(reward == 0.0 || reward == 1.0);
        assert!(r["reward_detail"]["reason"].is_string(), "{}", r["reward_detail"]);
    }
}

#[test]
fn sql_and_api_environments_on_the_tiny_model() {
    let d = common::tmpdir();
    let p = d.path();
    let cfg = Path::new(concat!(env!("CARGO_MANIFEST_DIR"), "/../..")).join("scripts/golden/tiny.json");
    run_in(p, "arl-train", &["make-tokenizer", "--out", "tok"], b"").ok();
    run_in(p, "arl-train", &["init", "--config", s(&cfg), "--tokenizer", "tok", "--out", "m", "--seed", "4"], b"").ok();
    let server = serve_util::Server::start(&["--model-path", s(&p.join("m")), "--cpu-threads", "1"]);

    // SQL.
    run_in(p, "arl-tasks", &["sql", "-n", "2", "--difficulty", "3", "-o", "sql.jsonl"], b"").ok();
    let common_args = [
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
    ];
    let mut args: Vec<&str> = common_args.to_vec();
    args.extend(["-i", "sql.jsonl", "--tools", "sql", "-o", "sql-roll.jsonl"]);
    run_in(p, "arl-rollout", &args, b"").ok();
    run_in(p, "arl-reward", &["-q", "--rm", "sql", "-i", "sql-roll.jsonl", "-o", "sql-scored.jsonl"], b"").ok();
    check(&jsonl(&std::fs::read(p.join("sql-scored.jsonl")).unwrap()), "sql", 4);

    // API, against arl-env.
    let env = common::EnvServer::start(&[]);
    let spec = env.spec();
    run_in(p, "arl-tasks", &["api", "-n", "2", "--difficulty", "3", "-o", "api.jsonl"], b"").ok();
    let mut args: Vec<&str> = common_args.to_vec();
    args.extend(["-i", "api.jsonl", "--openapi", &spec, "-o", "api-roll.jsonl"]);
    run_in(p, "arl-rollout", &args, b"").ok();
    run_in(
        p,
        "arl-reward",
        &["-q", "--rm", "api", "--openapi", &spec, "-i", "api-roll.jsonl", "-o", "api-scored.jsonl"],
        b"",
    )
    .ok();
    check(&jsonl(&std::fs::read(p.join("api-scored.jsonl")).unwrap()), "create_order", 4);
}
