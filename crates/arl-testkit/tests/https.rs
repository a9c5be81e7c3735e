//! HTTPS to the services users point arl at, through the real binaries: a
//! remote reward, a model judge (scripted `arl-serve`) and OpenAPI tools
//! (`arl-env`), each behind a TLS terminator on loopback with a certificate
//! from a throwaway authority that the client trusts through `SSL_CERT_FILE`;
//! without it the same URL fails on the certificate.
use arl_testkit::common::{self, jsonl, run_in_env, to_jsonl, EnvServer};
use arl_testkit::serve_util;
use arl_testkit::tls::{port_of, Tls};
use serde_json::{json, Value};

/// A loopback reward server: reward 1 when the response contains the label.
fn reward_backend() -> u16 {
    use axum::{routing::post, Json, Router};
    let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    l.set_nonblocking(true).unwrap();
    let port = l.local_addr().unwrap().port();
    std::thread::spawn(move || {
        let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
        rt.block_on(async move {
            let app = Router::new().route(
                "/score",
                post(|Json(b): Json<Value>| async move {
                    let ok = b["response"].as_str().unwrap_or("").contains(b["label"].as_str().unwrap_or("\u{0}"));
                    Json(json!({"reward": if ok { 1.0 } else { 0.0 }}))
                }),
            );
            axum::serve(tokio::net::TcpListener::from_std(l).unwrap(), app).await.unwrap();
        });
    });
    port
}

#[test]
fn remote_reward_over_https_trusts_the_given_authority_only() {
    let tls = Tls::new();
    let (_proxy, base) = tls.proxy(reward_backend());
    let url = format!("{base}/score");
    let ca = tls.ca();
    let ca = ca.to_str().unwrap();
    let d = common::tmpdir();
    let recs = [
        json!({"prompt": "q", "response": "it is blue", "label": "blue"}),
        json!({"prompt": "q", "response": "red", "label": "blue"}),
    ];
    let args = ["-q", "--rm", "remote", "--url", url.as_str(), "--retries", "1"];
    let out = run_in_env(d.path(), "arl-reward", &args, &to_jsonl(&recs), &[("SSL_CERT_FILE", ca)]).ok();
    let got: Vec<f64> = jsonl(&out.stdout).iter().map(|r| r["reward"].as_f64().unwrap()).collect();
    assert_eq!(got, [1.0, 0.0]);
    // The system's roots do not know the test authority: the TLS handshake
    // fails, and the error says why.
    let r = run_in_env(d.path(), "arl-reward", &args, &to_jsonl(&recs[..1]), &[]);
    assert_eq!(r.code, 65, "{}", r.stderr);
    assert!(r.stderr.to_lowercase().contains("certificate"), "{}", r.stderr);
}

#[test]
fn model_judge_and_openapi_tools_over_https() {
    let tls = Tls::new();
    let ca = tls.ca();
    let ca = ca.to_str().unwrap();
    let d = common::tmpdir();
    let p = d.path();

    // A model judge (arl-serve's OpenAI endpoint, scripted verdict) behind TLS.
    let model = p.join("model");
    serve_util::scripted_model_dir(&model);
    let script = json!({"when": "[Answer A]\nalpha\n\n[Answer B]\nbeta", "completion": "Answer B is better. [[B]]"});
    std::fs::write(p.join("judge.jsonl"), to_jsonl(&[script])).unwrap();
    let judge = serve_util::Server::start(&[
        "--model-path",
        model.to_str().unwrap(),
        "--scripted",
        p.join("judge.jsonl").to_str().unwrap(),
    ]);
    let (_judge_tls, judge_url) = tls.proxy(port_of(&judge.url));
    let recs: Vec<Value> = ["alpha", "beta"]
        .iter()
        .enumerate()
        .map(|(k, a)| json!({"prompt_id": "q", "sample_index": k, "prompt": "Name a letter.", "response": a}))
        .collect();
    let args = ["-q", "--rm", "arena", "--judge", "model", "--judge-url", judge_url.as_str()];
    let out = jsonl(&run_in_env(p, "arl-reward", &args, &to_jsonl(&recs), &[("SSL_CERT_FILE", ca)]).ok().stdout);
    let m = &out[0]["reward_detail"]["matches"][0];
    assert_eq!(m["winner"], "b", "{m}");
    assert_eq!(m["judge"]["reply"], "Answer B is better. [[B]]");
    assert!(out[1]["reward"].as_f64().unwrap() > out[0]["reward"].as_f64().unwrap());

    // OpenAPI tools: the shop's spec with its server behind TLS; every tool
    // call of the reference solutions goes over HTTPS.
    let env = EnvServer::start(&[]);
    let (_env_tls, env_url) = tls.proxy(port_of(&env.url));
    let mut spec: Value = serve_util::client().get(env.spec()).send().unwrap().json().unwrap();
    spec["servers"][0]["url"] = json!(env_url);
    std::fs::write(p.join("spec.json"), spec.to_string()).unwrap();
    let tasks = common::run("arl-tasks", &["api", "-n", "4", "--seed", "3", "--with-solutions", "-q"], b"").ok();
    let scored = run_in_env(
        p,
        "arl-reward",
        &["-q", "--rm", "api", "--openapi", "spec.json"],
        &tasks.stdout,
        &[("SSL_CERT_FILE", ca)],
    )
    .ok();
    for r in jsonl(&scored.stdout) {
        assert_eq!(r["reward"], 1.0, "{}", r["reward_detail"]);
        assert_eq!(r["reward_detail"]["call_errors"], 0, "{}", r["reward_detail"]);
    }
}
