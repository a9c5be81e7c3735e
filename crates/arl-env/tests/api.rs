//! The API environment through the real binaries: `arl-env` (the shop
//! service with per-episode state and its OpenAPI spec) on loopback,
//! `arl-tasks api` → `arl-reward --rm api` (reference solutions 1, wrong ones
//! 0 with a reason), abuse of the service (bad arguments, huge bodies,
//! unknown episodes, another episode's state), and `arl-rollout --openapi`
//! against a scripted `arl-serve`: tool calls over HTTP, the episode id in
//! `metadata`, tool turns masked, goals checked in the service.
use arl_testkit::common;
use arl_testkit::serve_util;

use common::{jsonl, run, run_in};
use serde_json::{json, Value};

/// A running `arl-env --port 0`, killed on drop.
use common::{prompts_of, to_jsonl, EnvServer as Env};

fn tasks(n: &str, level: &str, seed: &str) -> Vec<Value> {
    jsonl(
        &run("arl-tasks", &["api", "-n", n, "--difficulty", level, "--seed", seed, "--with-solutions", "-q"], b"")
            .ok()
            .stdout,
    )
}

fn score(env: &Env, recs: &[Value]) -> Vec<Value> {
    jsonl(&run("arl-reward", &["--rm", "api", "--openapi", &env.spec(), "-q"], &to_jsonl(recs)).ok().stdout)
}

#[test]
fn api_reference_solutions_score_one_wrong_ones_zero() {
    let env = Env::start(&[]);
    let recs = tasks("24", "5", "2");
    let kinds: std::collections::BTreeSet<&str> =
        recs.iter().map(|r| r["metadata"]["kind"].as_str().unwrap()).collect();
    assert_eq!(kinds.len(), 4, "{kinds:?}");
    for r in score(&env, &recs) {
        let d = &r["reward_detail"];
        assert_eq!(r["reward"], 1.0, "{d}");
        assert_eq!(d["mode"], "replayed");
        assert_eq!(d["call_errors"], 0, "{d}");
        // The replay episode is gone once scored.
        let code = http()
            .get(format!("{}/episodes/{}", env.url, d["episode_id"].as_str().unwrap()))
            .send()
            .unwrap()
            .status()
            .as_u16();
        assert_eq!(code, 404);
    }
    // Wrong: the last call left out (nothing ordered, cancelled or restocked),
    // or an order of one unit more than asked.
    let mut wrong = recs.clone();
    let quantity = regex::Regex::new(r#""quantity": (\d+)"#).unwrap();
    for (i, r) in wrong.iter_mut().enumerate() {
        let resp = r["response"].as_str().unwrap().to_string();
        let calls: Vec<&str> = resp.split("</tool_call>").filter(|s| s.contains("<tool_call>")).collect();
        let kept = if i % 2 == 0 || !resp.contains("create_order") {
            calls[..calls.len() - 1].iter().map(|c| format!("{c}</tool_call>")).collect::<String>()
        } else {
            quantity
                .replace_all(&resp, |c: &regex::Captures| format!("\"quantity\": {}", c[1].parse::<i64>().unwrap() + 1))
                .into_owned()
        };
        r["response"] = json!(kept);
    }
    for r in score(&env, &wrong) {
        let d = &r["reward_detail"];
        assert_eq!(r["reward"], 0.0, "{d}");
        let why = d["reason"].as_str().unwrap();
        assert!(why.contains("order") || why.contains("stock"), "{why}");
    }
}

fn http() -> reqwest::blocking::Client {
    arl_http::client::blocking_builder().timeout(std::time::Duration::from_secs(30)).build().unwrap()
}

fn new_episode(env: &Env) -> String {
    let setup = json!({"items": [{"sku": "A", "name": "lamp", "category": "home", "price": 5, "stock": 3}]});
    let v: Value =
        http().post(format!("{}/episodes", env.url)).json(&json!({"setup": setup})).send().unwrap().json().unwrap();
    v["episode_id"].as_str().unwrap().to_string()
}

#[test]
fn api_abuse_is_refused_and_episodes_are_isolated() {
    let env = Env::start(&["--max-body-bytes", "4096"]);
    let c = http();
    let (a, b) = (new_episode(&env), new_episode(&env));
    assert_ne!(a, b);
    let post = |ep: Option<&str>, path: &str, body: String| {
        let mut r = c.post(format!("{}{path}", env.url)).header("content-type", "application/json").body(body);
        if let Some(e) = ep {
            r = r.header("X-Episode-Id", e);
        }
        let r = r.send().unwrap();
        let code = r.status().as_u16();
        (code, r.text().unwrap())
    };
    // Bad arguments.
    for body in [
        r#"{"sku": "A", "quantity": -1}"#,
        r#"{"sku": "A", "quantity": "many"}"#,
        r#"{"quantity": 1}"#,
        r#"{"sku": 5, "quantity": 1}"#,
        r#"{"sku": "A", "quantity": 100000}"#,
    ] {
        assert_eq!(post(Some(&a), "/orders", body.into()).0, 422, "{body}");
    }
    assert_eq!(post(Some(&a), "/orders", "not json".into()).0, 400);
    assert_eq!(post(Some(&a), "/orders", "[1, 2]".into()).0, 400);
    assert_eq!(post(Some(&a), "/orders", r#"{"sku": "NOPE", "quantity": 1}"#.into()).0, 404);
    assert_eq!(post(Some(&a), "/orders/notanumber/cancel", "{}".into()).0, 422);
    // A huge body.
    let huge = format!(r#"{{"sku": "A", "quantity": 1, "pad": "{}"}}"#, "x".repeat(100_000));
    assert_eq!(post(Some(&a), "/orders", huge).0, 413);
    // Unknown or missing episode, unknown route.
    assert_eq!(post(Some("ep-0000"), "/orders", r#"{"sku": "A", "quantity": 1}"#.into()).0, 404);
    assert_eq!(post(None, "/orders", r#"{"sku": "A", "quantity": 1}"#.into()).0, 400);
    assert_eq!(c.get(format!("{}/episodes/ep-0000", env.url)).send().unwrap().status().as_u16(), 404);
    assert_eq!(post(Some(&a), "/admin/drop", "{}".into()).0, 404);
    // A setup too large for an episode.
    let items: Vec<Value> = (0..300)
        .map(|i| json!({"sku": format!("S{i}"), "name": "x", "category": "c", "price": 1, "stock": 1}))
        .collect();
    let r = c.post(format!("{}/episodes", env.url)).json(&json!({"setup": {"items": items}})).send().unwrap();
    assert!(r.status().as_u16() == 413 || r.status().as_u16() == 422, "{}", r.status());
    // Episode a's order leaves b alone.
    let (code, text) = post(Some(&a), "/orders", r#"{"sku": "A", "quantity": 2}"#.into());
    assert_eq!(code, 200, "{text}");
    let sa: Value = c.get(format!("{}/episodes/{a}", env.url)).send().unwrap().json().unwrap();
    let sb: Value = c.get(format!("{}/episodes/{b}", env.url)).send().unwrap().json().unwrap();
    assert_eq!(sa["items"][0]["stock"], 1);
    assert_eq!(sa["orders"].as_array().unwrap().len(), 1);
    assert_eq!(sb["items"][0]["stock"], 3);
    assert!(sb["orders"].as_array().unwrap().is_empty());
    // b cannot cancel a's order: order ids are per episode.
    assert_eq!(post(Some(&b), "/orders/1/cancel", "{}".into()).0, 404);
    let sa2: Value = c.get(format!("{}/episodes/{a}", env.url)).send().unwrap().json().unwrap();
    assert_eq!(sa2, sa);
    // Deleted episodes are gone.
    assert_eq!(c.delete(format!("{}/episodes/{b}", env.url)).send().unwrap().status().as_u16(), 200);
    assert_eq!(post(Some(&b), "/orders", r#"{"sku": "A", "quantity": 1}"#.into()).0, 404);
}

#[test]
fn openapi_spec_becomes_tools_and_bad_calls_are_errors() {
    let env = Env::start(&[]);
    let api = arl_env::tools::openapi::OpenApi::load(&env.spec()).unwrap();
    let names: Vec<&str> = api.ops.iter().map(|o| o.id.as_str()).collect();
    assert_eq!(names.len(), 6, "{names:?}");
    for n in ["list_items", "get_item", "restock_item", "create_order", "list_orders", "cancel_order"] {
        assert!(names.contains(&n), "{n} in {names:?}");
    }
    let co = api.op("create_order").unwrap();
    let params = &co.definition["function"]["parameters"];
    assert_eq!(params["required"], json!(["sku", "quantity"]));
    assert_eq!(params["properties"]["quantity"]["type"], "integer");
    let ri = api.op("restock_item").unwrap();
    assert_eq!(ri.definition["function"]["parameters"]["required"], json!(["sku", "quantity"]));
    // Requests: path encoding, query, body; bad calls are refused before HTTP.
    let r = api.request("get_item", &json!({"sku": "A/../../episodes"})).unwrap();
    assert!(r.url.ends_with("/items/A%2F..%2F..%2Fepisodes"), "{}", r.url);
    let r = api.request("list_items", &json!({"category": "home & garden"})).unwrap();
    assert!(r.url.ends_with("/items?category=home%20%26%20garden"), "{}", r.url);
    assert!(api.request("create_order", &json!({"sku": "A"})).unwrap_err().contains("needs the argument `quantity`"));
    assert!(api
        .request("create_order", &json!({"sku": "A", "quantity": 1, "admin": true}))
        .unwrap_err()
        .contains("no argument `admin`"));
    assert!(api.request("create_episode", &json!({})).unwrap_err().contains("unknown operation"));
}

/// tasks → arl-rollout --openapi (scripted arl-serve playing each task's
/// demonstration) → arl-reward --rm api on the recorded episodes.
#[test]
fn rollout_with_openapi_tools_records_episodes_and_reaches_goals() {
    let env = Env::start(&[]);
    let d = common::tmpdir();
    let p = d.path();
    serve_util::scripted_model_dir(&p.join("model"));
    let recs = tasks("6", "5", "9");
    let prompts = prompts_of(&recs);
    std::fs::write(p.join("tasks.jsonl"), to_jsonl(&prompts)).unwrap();
    let mut scripts = Vec::new();
    for r in &recs {
        let msgs = r["messages"].as_array().unwrap();
        let mut when = r["prompt"].as_str().unwrap().to_string();
        for m in &msgs[1..] {
            match m["role"].as_str().unwrap() {
                "assistant" => scripts.push(json!({"when": when, "completion": m["content"]}).to_string()),
                _ => when = format!("<tool_response>\n{}", m["content"].as_str().unwrap()),
            }
        }
    }
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
            "--openapi",
            &env.spec(),
            "--max-turns",
            "8",
            "-n",
            "2",
            "-o",
            "roll.jsonl",
        ],
        b"",
    )
    .ok();
    let rolled = jsonl(&std::fs::read(p.join("roll.jsonl")).unwrap());
    assert_eq!(rolled.len(), 12);
    let mut ids = std::collections::HashSet::new();
    for r in &rolled {
        assert!(r["tool_calls"].as_u64().unwrap() >= 2, "{r}");
        assert_eq!(r["metadata"]["tool_errors"], 0, "{}", r["response"]);
        assert_eq!(r["status"], "completed");
        assert!(ids.insert(r["metadata"]["episode_id"].as_str().unwrap().to_string()), "one episode per sample");
        // The prompt offered the API's operations as tools.
        let toks: Vec<u8> = r["tokens"].as_array().unwrap()[..r["prompt_len"].as_u64().unwrap() as usize]
            .iter()
            .filter_map(|x| x.as_u64().filter(|t| *t < 256).map(|t| t as u8))
            .collect();
        assert!(String::from_utf8_lossy(&toks).contains("\"name\": \"create_order\""));
        // Tool turns are masked: what the service answered is in the mask-0 tokens only.
        let mask: Vec<u64> = r["loss_mask"].as_array().unwrap().iter().map(|x| x.as_u64().unwrap()).collect();
        let pl = r["prompt_len"].as_u64().unwrap() as usize;
        let resp_toks = &r["tokens"].as_array().unwrap()[pl..];
        let masked: Vec<u8> = resp_toks
            .iter()
            .zip(&mask)
            .filter(|(t, m)| **m == 0 && t.as_u64().unwrap() < 256)
            .map(|(t, _)| t.as_u64().unwrap() as u8)
            .collect();
        let gen: Vec<u8> = resp_toks
            .iter()
            .zip(&mask)
            .filter(|(t, m)| **m == 1 && t.as_u64().unwrap() < 256)
            .map(|(t, _)| t.as_u64().unwrap() as u8)
            .collect();
        assert!(String::from_utf8_lossy(&masked).contains("\"sku\""));
        assert!(
            String::from_utf8_lossy(&gen).contains("<tool_call>") || String::from_utf8_lossy(&gen).contains("\"name\"")
        );
        assert!(!String::from_utf8_lossy(&gen).contains("\"stock\":"), "service output in the trained tokens");
    }
    let scored = score(&env, &rolled);
    for r in &scored {
        assert_eq!(r["reward"], 1.0, "{}", r["reward_detail"]);
        assert_eq!(r["reward_detail"]["mode"], "recorded");
    }
    // The same trajectories with another episode's id fail that episode's goal or are rejected.
    let mut swapped = rolled.clone();
    let n = swapped.len();
    let first_id = swapped[0]["metadata"]["episode_id"].clone();
    swapped[n - 1]["metadata"]["episode_id"] = json!("ep-does-not-exist");
    let out = run("arl-reward", &["--rm", "api", "--openapi", &env.spec(), "-q"], &to_jsonl(&swapped[n - 1..]));
    assert_eq!(out.code, 65, "an unknown episode is bad data, not a score");
    assert!(out.stderr.contains("does not know episode"), "{}", out.stderr);
    // Another sample's episode: its state is scored, not this record's (ids are the key).
    swapped[n - 1]["metadata"]["episode_id"] = first_id;
    let out = score(&env, &swapped[n - 1..]);
    assert_eq!(out[0]["reward_detail"]["episode_id"], swapped[0]["metadata"]["episode_id"]);
}
