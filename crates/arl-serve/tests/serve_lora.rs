//! LoRA adapters on `arl-serve` (the real tiny model, CPU, float32), and
//! `arl-rollout --lora` / `arl-sync --lora` against it: requests for two
//! adapters and the base decoded in shared batches give the log-probs of
//! the merged checkpoints (`W + s·B·A`, computed here) and of the base;
//! loads that do not fit are refused and change nothing; unload; versions.
use arl_model::lora::{ADAPTER_CONFIG, ADAPTER_WEIGHTS};
use arl_model::{weights, LoraConfig, Model};
use arl_testkit::common;
use arl_testkit::serve_util::{self, Server};
use serde_json::{json, Value};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use tch::{Device, Kind, Tensor};

fn tiny_model() -> PathBuf {
    std::env::var_os("ARL_TEST_MODEL").map(PathBuf::from).unwrap_or_else(arl_testkit::tiny::model)
}

fn s(p: &Path) -> String {
    p.display().to_string()
}

fn start(model: &Path, extra: &[&str]) -> Server {
    let m = s(model);
    let mut args = vec!["--model-path", &m, "--device", "cpu", "--dtype", "float32", "--random-seed", "1"];
    args.extend_from_slice(extra);
    Server::start(&args)
}

fn parent(module: &str) -> &'static str {
    if ["gate_proj", "up_proj", "down_proj"].contains(&module) {
        "mlp"
    } else {
        "self_attn"
    }
}

fn layers(model: &Path) -> usize {
    let cfg: Value = serde_json::from_str(&std::fs::read_to_string(model.join("config.json")).unwrap()).unwrap();
    cfg["num_hidden_layers"].as_u64().unwrap() as usize
}

/// Writes a LoRA adapter for `base` into `dir`: random non-zero A and B
/// (seeded) for every target projection, shaped for a model whose
/// projections are `grow` times as wide as `base`'s (1: `base` itself).
fn write_adapter(base: &Path, dir: &Path, cfg: &LoraConfig, seed: i64, grow: i64) {
    let w = weights::read_all(base).unwrap();
    tch::manual_seed(seed);
    let r = cfg.rank as i64;
    let mut out = BTreeMap::new();
    for layer in 0..layers(base) {
        for m in &cfg.targets {
            let p = parent(m);
            let (o, i) = w[&format!("model.layers.{layer}.{p}.{m}.weight")].size2().unwrap();
            let (o, i) = (o * grow, i * grow);
            let a = Tensor::randn([r, i], (Kind::Float, Device::Cpu)) / (i as f64).sqrt();
            let b = Tensor::randn([o, r], (Kind::Float, Device::Cpu)) * 0.05;
            out.insert(format!("base_model.model.model.layers.{layer}.{p}.{m}.lora_A.weight"), a);
            out.insert(format!("base_model.model.model.layers.{layer}.{p}.{m}.lora_B.weight"), b);
        }
    }
    std::fs::create_dir_all(dir).unwrap();
    weights::write_file(&dir.join(ADAPTER_WEIGHTS), &out, Kind::Float).unwrap();
    std::fs::write(dir.join(ADAPTER_CONFIG), cfg.to_json(&s(base)).to_string()).unwrap();
}

/// The merged checkpoint of `base` and the adapter in `adapter`: every
/// target weight `W + s·B·A`, the rest of `base` as it is.
fn write_merged(base: &Path, adapter: &Path, out: &Path) {
    let (cfg, _) = arl_model::lora::read_config(adapter).unwrap();
    let ab = weights::read_file(&adapter.join(ADAPTER_WEIGHTS)).unwrap();
    let mut w: BTreeMap<String, Tensor> = weights::read_all(base).unwrap().into_iter().collect();
    for layer in 0..layers(base) {
        for m in &cfg.targets {
            let p = parent(m);
            let key = |ab: &str| format!("base_model.model.model.layers.{layer}.{p}.{m}.lora_{ab}.weight");
            let name = format!("model.layers.{layer}.{p}.{m}.weight");
            let merged = &w[&name] + ab[&key("B")].matmul(&ab[&key("A")]) * cfg.scale();
            w.insert(name, merged);
        }
    }
    std::fs::create_dir_all(out).unwrap();
    for e in std::fs::read_dir(base).unwrap() {
        let e = e.unwrap();
        if !e.file_name().to_string_lossy().ends_with(".safetensors") {
            std::fs::copy(e.path(), out.join(e.file_name())).unwrap();
        }
    }
    weights::write_file(&out.join("model.safetensors"), &w, Kind::Float).unwrap();
}

/// Log-probs of `ids[1..]` under the checkpoint in `dir` (the training forward, T = 1).
fn score(dir: &Path, ids: &[i64]) -> Vec<f64> {
    let _g = tch::no_grad_guard();
    let model = Model::load(dir, Device::Cpu, Kind::Float).unwrap();
    let x = Tensor::from_slice(ids).view([1, -1]);
    let lp = model.forward(&x, None).to_kind(Kind::Float).log_softmax(-1, Kind::Float).squeeze_dim(0);
    (1..ids.len()).map(|i| lp.double_value(&[i as i64 - 1, ids[i]])).collect()
}

/// The prompt ids, all ids and the log-probs of `ids[1..]` of one `/generate`
/// item answered with `logprob_start_len: 0`.
fn answer(v: &Value) -> (Vec<i64>, Vec<f64>) {
    let lps = |k: &str| -> Vec<(Option<f64>, i64)> {
        v["meta_info"][k].as_array().unwrap().iter().map(|e| (e[0].as_f64(), e[1].as_i64().unwrap())).collect()
    };
    let (inp, out) = (lps("input_token_logprobs"), lps("output_token_logprobs"));
    let ids: Vec<i64> = inp.iter().chain(&out).map(|e| e.1).collect();
    let got: Vec<f64> = inp.iter().skip(1).chain(&out).map(|e| e.0.unwrap()).collect();
    (ids, got)
}

fn max_diff(a: &[f64], b: &[f64]) -> f64 {
    assert_eq!(a.len(), b.len());
    a.iter().zip(b).map(|(x, y)| (x - y).abs()).fold(0.0, f64::max)
}

/// Sends every body to `/generate` at once, each on its own thread.
fn concurrently(s: &Server, bodies: Vec<Value>) -> Vec<(u16, Value)> {
    let url = format!("{}/generate", s.url);
    let hs: Vec<_> = bodies
        .into_iter()
        .map(|b| {
            let u = url.clone();
            std::thread::spawn(move || serve_util::post(&u, &b))
        })
        .collect();
    hs.into_iter().map(|h| h.join().unwrap()).collect()
}

fn sampled(prompt: &[i64], lora: Value, new: usize, seed: u64) -> Value {
    json!({"input_ids": prompt, "lora_path": lora, "return_logprob": true, "logprob_start_len": 0,
           "sampling_params": {"temperature": 1.0, "max_new_tokens": new, "ignore_eos": true, "sampling_seed": seed}})
}

/// Two adapters (all-linear rank 4; q/v rank 2 with rsLoRA) and the base,
/// in one batched request and in concurrent single ones: every item's
/// prompt and output log-probs are those of its own reference checkpoint.
#[test]
fn adapters_and_base_share_batches_and_match_merged_checkpoints() {
    let base = tiny_model();
    let d = common::tmpdir();
    let (a, b) = (d.path().join("a"), d.path().join("b"));
    write_adapter(&base, &a, &LoraConfig::new(4, 8.0, 0.0, "all-linear").unwrap(), 1, 1);
    let mut cb = LoraConfig::new(2, 4.0, 0.0, "q_proj,v_proj").unwrap();
    cb.rslora = true;
    write_adapter(&base, &b, &cb, 2, 1);
    let (ma, mb) = (d.path().join("merged-a"), d.path().join("merged-b"));
    write_merged(&base, &a, &ma);
    write_merged(&base, &b, &mb);
    // `b` by its path alone (its name is then the path, as in SGLang).
    let (sa, sb) = (format!("a={}", s(&a)), s(&b));
    let server = start(&base, &["--cpu-matmul", "onednn", "--lora-paths", &sa, &sb]);
    let reference = |lora: &Value| -> &Path {
        match lora.as_str() {
            None => &base,
            Some("a") => &ma,
            Some(_) => &mb,
        }
    };
    let names = [json!(null), json!("a"), json!(sb)];
    // One batch: prefilled together, decoded together.
    let prompts: Vec<Vec<i64>> = (0..6).map(|i| (3 + i..12 + 2 * i).collect()).collect();
    let loras: Vec<Value> = (0..6).map(|i| names[i % 3].clone()).collect();
    let batch = server.generate(json!({
        "input_ids": prompts, "lora_path": loras, "return_logprob": true, "logprob_start_len": 0,
        "sampling_params": {"temperature": 1.0, "max_new_tokens": 12, "ignore_eos": true, "sampling_seed": 3}}));
    let mut items: Vec<(Value, Value)> = batch.as_array().unwrap().iter().cloned().zip(loras.clone()).collect();
    // Concurrent single requests: they meet in the scheduler's batches.
    let bodies: Vec<Value> =
        (0..9).map(|i| sampled(&(20 + i..30 + i).collect::<Vec<_>>(), names[i as usize % 3].clone(), 16, 5)).collect();
    for ((code, v), body) in concurrently(&server, bodies.clone()).into_iter().zip(&bodies) {
        assert_eq!(code, 200, "{v}");
        items.push((v, body["lora_path"].clone()));
    }
    let mut worst = 0.0f64;
    for (i, (v, lora)) in items.iter().enumerate() {
        let (ids, got) = answer(v);
        let want = score(reference(lora), &ids);
        let diff = max_diff(&got, &want);
        assert!(diff < 1e-4, "item {i} (lora_path {lora}): max |server - reference| = {diff}");
        worst = worst.max(diff);
        let version = if lora.is_null() { "default" } else { "1" };
        assert_eq!(v["meta_info"]["weight_version"], version, "item {i}");
        if !lora.is_null() {
            let off = max_diff(&got, &score(&base, &ids));
            assert!(off > 1e-2, "item {i}: adapter {lora} computes what the base does (max |Δ| {off})");
        }
    }
    eprintln!("{} items over 2 adapters and the base: max |server - reference| = {worst:.2e}", items.len());
    let info = server.get("/get_model_info").1;
    let mut listed: Vec<String> = info["lora_adapters"].as_object().unwrap().keys().cloned().collect();
    let mut want = vec!["a".to_string(), sb.clone()];
    listed.sort();
    want.sort();
    assert_eq!(listed, want, "{info}");
    assert_eq!(info["lora_adapters"]["a"]["r"], 4);
    assert_eq!(info["lora_adapters"]["a"]["path"], s(&a));
    let sinfo = server.get("/get_server_info").1;
    assert_eq!(sinfo["lora_paths"], json!({"a": s(&a), sb.clone(): sb}), "{sinfo}");
    let models = server.get("/v1/models").1;
    assert_eq!(models["data"].as_array().unwrap().len(), 3, "{models}");
    let served = s(&base.canonicalize().unwrap());
    assert_eq!(models["data"][0]["id"], served);
    assert_eq!(models["data"][1]["parent"], served);
    // The OpenAI endpoint takes `lora_path` as an extra body field.
    let chat = |lora: Value| {
        serve_util::post(
            &format!("{}/v1/chat/completions", server.url),
            &json!({"messages": [{"role": "user", "content": "hi"}], "max_tokens": 6, "temperature": 0,
                    "logprobs": true, "lora_path": lora}),
        )
    };
    let (code, with) = chat(json!("a"));
    assert_eq!(code, 200, "{with}");
    let (_, without) = chat(json!(null));
    let lp = |v: &Value| v["choices"][0]["logprobs"]["content"][0]["logprob"].as_f64().unwrap();
    assert!((lp(&with) - lp(&without)).abs() > 1e-3, "{with}\n{without}");
    let (code, v) = chat(json!("nope"));
    assert_eq!(code, 400, "{v}");
    assert!(v.to_string().contains("`nope` is not loaded"), "{v}");
}

/// The same ids, and log-probs within 1e-5 (the replicas may differ in the last bits).
fn same(a: &Value, b: &Value) {
    let ((ia, la), (ib, lb)) = (answer(a), answer(b));
    assert_eq!(ia, ib);
    assert!(max_diff(&la, &lb) < 1e-5);
}

fn greedy(lora: Value) -> Value {
    json!({"input_ids": [5, 6, 7, 8, 9], "lora_path": lora, "return_logprob": true, "logprob_start_len": 0,
           "sampling_params": {"temperature": 0, "max_new_tokens": 10, "ignore_eos": true}})
}

fn load(server: &Server, name: &str, dir: &Path, version: Option<&str>) -> (u16, Value) {
    let mut body = json!({"lora_name": name, "lora_path": s(dir)});
    if let Some(v) = version {
        body["weight_version"] = json!(v);
    }
    server.post("/load_lora_adapter", &body)
}

/// Two replicas: refused loads (another model's shapes, a missing
/// directory, DoRA) answer 400 and change nothing; a load reaches both; a
/// replacement serves new requests while a request in flight finishes on
/// the version it started with; unload; unknown names are 400s. And a bad
/// `--lora-paths` stops the server at start with exit code 65.
#[test]
fn load_replace_unload_and_refusals_on_two_replicas() {
    let base = tiny_model();
    let d = common::tmpdir();
    let cfg = LoraConfig::new(4, 8.0, 0.0, "q_proj,k_proj,o_proj,down_proj").unwrap();
    let (a, a2, other) = (d.path().join("a"), d.path().join("a2"), d.path().join("other"));
    write_adapter(&base, &a, &cfg, 3, 1);
    write_adapter(&base, &a2, &cfg, 4, 1);
    write_adapter(&base, &other, &cfg, 3, 2);
    let dora = d.path().join("dora");
    write_adapter(&base, &dora, &cfg, 3, 1);
    let mut v = cfg.to_json(&s(&base));
    v["use_dora"] = json!(true);
    std::fs::write(dora.join(ADAPTER_CONFIG), v.to_string()).unwrap();
    let (ma, ma2) = (d.path().join("merged-a"), d.path().join("merged-a2"));
    write_merged(&base, &a, &ma);
    write_merged(&base, &a2, &ma2);

    let server = start(&base, &["--dp-size", "2", "--cpu-matmul", "blas"]);
    let before = server.generate(greedy(json!(null)));
    for (dir, why) in [(&other, "shape"), (&d.path().join("missing"), "cannot read"), (&dora, "DoRA")] {
        let (code, v) = load(&server, "a", dir, None);
        assert_eq!((code, v["success"].clone(), v["loaded_adapters"].clone()), (400, json!(false), json!({})), "{v}");
        let msg = v["error_message"].as_str().unwrap();
        assert!(msg.contains(why) && msg.contains("`a`"), "{msg}");
        same(&server.generate(greedy(json!(null))), &before);
    }
    let (code, v) = server.post("/generate", &greedy(json!("a")));
    assert_eq!(code, 400, "{v}");
    assert!(v["error"]["message"].as_str().unwrap().contains("`a` is not loaded"), "{v}");

    let (code, v) = load(&server, "a", &a, Some("7"));
    assert_eq!(
        (code, v.clone()),
        (200, json!({"success": true, "error_message": null, "loaded_adapters": {"a": s(&a)}}))
    );
    // Both replicas serve it: concurrent requests spread over them.
    let check = |answers: Vec<(u16, Value)>, reference: &Path, version: &str| {
        for (code, v) in answers {
            assert_eq!(code, 200, "{v}");
            let (ids, got) = answer(&v);
            let diff = max_diff(&got, &score(reference, &ids));
            assert!(diff < 1e-4, "max |server - {}| = {diff}", reference.display());
            assert_eq!(v["meta_info"]["weight_version"], version);
        }
    };
    let bodies =
        |lora: &str| (0..6).map(|i| sampled(&(30 + i..40 + i).collect::<Vec<_>>(), json!(lora), 8, 9)).collect();
    check(concurrently(&server, bodies("a")), &ma, "7");
    let states = server.get("/get_server_info").1["internal_states"].clone();
    assert_eq!(states.as_array().unwrap().len(), 2);
    assert!(server.get("/get_model_info").1["lora_adapters"]["a"]["weight_version"] == "7");

    // A long request on version 7 is running when version 8 replaces it.
    let ctx = server.get("/get_server_info").1["context_length"].as_u64().unwrap();
    let url = format!("{}/generate", server.url);
    let long_new = 1000.min(ctx as usize - 4);
    let long = std::thread::spawn(move || serve_util::post(&url, &sampled(&[1, 2, 3], json!("a"), long_new, 1)));
    for _ in 0..200 {
        if server.get("/get_load").1["num_running_reqs"].as_u64() == Some(1) {
            break;
        }
        std::thread::sleep(std::time::Duration::from_millis(10));
    }
    assert_eq!(server.get("/get_load").1["num_running_reqs"], 1, "the long request is not running");
    let (code, v) = load(&server, "a", &a2, Some("8"));
    assert_eq!((code, v["loaded_adapters"].clone()), (200, json!({"a": s(&a2)})), "{v}");
    check(concurrently(&server, bodies("a")), &ma2, "8");
    let (code, v) = long.join().unwrap();
    assert_eq!(v["meta_info"]["completion_tokens"], long_new, "{}", v["meta_info"]);
    check(vec![(code, v)], &ma, "7");

    // Unknown names and malformed `lora_path`s.
    let (code, v) = server.post("/generate", &json!({"input_ids": [[1, 2], [3, 4]], "lora_path": ["a", "zz"]}));
    assert_eq!(code, 400);
    assert!(v["error"]["message"].as_str().unwrap().contains("`zz`"), "{v}");
    let (code, _) = server.post("/generate", &json!({"input_ids": [[1, 2], [3, 4]], "lora_path": ["a"]}));
    assert_eq!(code, 400);
    let (code, _) = server.post("/generate", &json!({"input_ids": [1, 2], "lora_path": 3}));
    assert_eq!(code, 400);

    let (code, v) = server.post("/unload_lora_adapter", &json!({"lora_name": "a"}));
    assert_eq!((code, v), (200, json!({"success": true, "error_message": null, "loaded_adapters": {}})));
    let (code, _) = server.post("/generate", &greedy(json!("a")));
    assert_eq!(code, 400);
    let (code, v) = server.post("/unload_lora_adapter", &json!({"lora_name": "a"}));
    assert_eq!((code, v["success"].clone()), (400, json!(false)), "{v}");
    assert!(v["error_message"].as_str().unwrap().contains("not loaded"), "{v}");
    same(&server.generate(greedy(json!(null))), &before);

    // A `--lora-paths` adapter that does not fit: exit 65 before listening.
    let bad = format!("x={}", s(&other));
    let r = common::run(
        "arl-serve",
        &["--model-path", &s(&base), "--device", "cpu", "--port", "0", "--lora-paths", &bad],
        b"",
    );
    assert_eq!(r.code, 65, "{}", r.stderr);
    assert!(r.stderr.contains(&format!("`--lora-paths {bad}`")) && r.stderr.contains("shape"), "{}", r.stderr);
}

/// `arl-rollout --lora a`: every request names the adapter, so the recorded
/// log-probs are the adapter's (the merged checkpoint's), not the base's.
#[test]
fn rollout_with_lora_records_the_adapters_logprobs() {
    let base = tiny_model();
    let d = common::tmpdir();
    let a = d.path().join("a");
    write_adapter(&base, &a, &LoraConfig::new(4, 8.0, 0.0, "all-linear").unwrap(), 6, 1);
    let ma = d.path().join("merged-a");
    write_merged(&base, &a, &ma);
    let server = start(&base, &["--lora-paths", &format!("a={}", s(&a))]);
    let prompts: String = (0..3)
        .map(|i| json!({"id": format!("p{i}"), "prompt": format!("add {i} and {i}")}).to_string() + "\n")
        .collect();
    std::fs::write(d.path().join("prompts.jsonl"), prompts).unwrap();
    let r = common::run_in(
        d.path(),
        "arl-rollout",
        &[
            "-q",
            "-i",
            "prompts.jsonl",
            "--endpoint",
            &server.url,
            "--tokenizer",
            &s(&base),
            "--lora",
            "a",
            "-n",
            "2",
            "--max-response-len",
            "16",
            "--max-turns",
            "1",
            "--temperature",
            "1.0",
        ],
        b"",
    );
    assert_eq!(r.code, 0, "{}", r.stderr);
    let recs = common::jsonl(&r.stdout);
    assert_eq!(recs.len(), 6);
    for rec in &recs {
        let ids: Vec<i64> = rec["tokens"].as_array().unwrap().iter().map(|t| t.as_i64().unwrap()).collect();
        let plen = rec["prompt_len"].as_u64().unwrap() as usize;
        let got: Vec<f64> = rec["rollout_log_probs"].as_array().unwrap().iter().map(|x| x.as_f64().unwrap()).collect();
        let mask: Vec<bool> = rec["loss_mask"].as_array().unwrap().iter().map(|m| m == 1).collect();
        assert_eq!((got.len(), mask.len()), (ids.len() - plen, ids.len() - plen));
        // The generated tokens (a tool turn, were there one, is not the model's).
        let generated = |lp: &[f64]| -> Vec<f64> { lp.iter().zip(&mask).filter(|x| *x.1).map(|x| *x.0).collect() };
        let got = generated(&got);
        let diff = max_diff(&got, &generated(&score(&ma, &ids)[plen - 1..]));
        assert!(diff < 1e-4, "max |rollout - adapter| = {diff}");
        let off = max_diff(&got, &generated(&score(&base, &ids)[plen - 1..]));
        assert!(off > 1e-2, "the rollout's log-probs are the base's (max |Δ| {off})");
        assert_eq!(rec["weight_versions"], json!(["1"]), "{rec}");
    }
    // An adapter the server does not have: the run fails and says which.
    let r = common::run_in(
        d.path(),
        "arl-rollout",
        &["-q", "-i", "prompts.jsonl", "--endpoint", &server.url, "--tokenizer", &s(&base), "--lora", "zz"],
        b"",
    );
    assert_ne!(r.code, 0);
    assert!(r.stderr.contains("`zz` is not loaded"), "{}", r.stderr);
}

/// `arl-sync --lora a`: a second version of adapter `a` reaches the server
/// and is verified; requests then run it and report its version. A server
/// that refuses an adapter fails the sync (exit 1) and keeps what it
/// served; an incomplete adapter directory touches no server (exit 65).
#[test]
fn sync_lora_pushes_a_new_adapter_version() {
    let base = tiny_model();
    let d = common::tmpdir();
    let cfg = LoraConfig::new(2, 4.0, 0.0, "v_proj,up_proj").unwrap();
    let (a1, a2, other) = (d.path().join("a1"), d.path().join("a2"), d.path().join("other"));
    write_adapter(&base, &a1, &cfg, 7, 1);
    write_adapter(&base, &a2, &cfg, 8, 1);
    write_adapter(&base, &other, &cfg, 8, 2);
    let (m1, m2) = (d.path().join("merged-1"), d.path().join("merged-2"));
    write_merged(&base, &a1, &m1);
    write_merged(&base, &a2, &m2);
    let server = start(&base, &["--lora-paths", &format!("a={}", s(&a1))]);
    let probe = || {
        let v = server.generate(sampled(&(10..20).collect::<Vec<_>>(), json!("a"), 6, 2));
        let (ids, got) = answer(&v);
        (ids, got, v["meta_info"]["weight_version"].as_str().unwrap().to_string())
    };
    let (ids, got, version) = probe();
    assert!(max_diff(&got, &score(&m1, &ids)) < 1e-4);
    assert_eq!(version, "1");
    let sync = |dir: &Path, version: &str| {
        common::run(
            "arl-sync",
            &["--checkpoint", &s(dir), "--lora", "a", "--weight-version", version, "--endpoint", &server.url],
            b"",
        )
    };
    let r = sync(&a2, "5");
    assert_eq!(r.code, 0, "{}\n{}", r.stdout_str(), r.stderr);
    assert!(
        r.stdout_str().starts_with("ok ") && r.stdout_str().contains("lora=a weight_version=5"),
        "{}",
        r.stdout_str()
    );
    let (ids, got, version) = probe();
    let diff = max_diff(&got, &score(&m2, &ids));
    assert!(diff < 1e-4, "after the sync: max |server - version 2| = {diff}");
    assert_eq!(version, "5");
    let info = server.get("/get_model_info").1;
    assert_eq!(info["lora_adapters"]["a"]["path"], s(&sync_abs(&a2)), "{info}");
    // Refused: another model's shapes. The server keeps version 5.
    let r = sync(&other, "6");
    assert_eq!(r.code, 1, "{}\n{}", r.stdout_str(), r.stderr);
    let out = r.stdout_str();
    assert!(out.starts_with("failed ") && out.contains("update: HTTP 400") && out.contains("shape"), "{out}");
    assert!(r.stderr.contains("do not serve LoRA adapter `a` at weight_version `6`"), "{}", r.stderr);
    let (ids, got, version) = probe();
    assert!(max_diff(&got, &score(&m2, &ids)) < 1e-4);
    assert_eq!(version, "5");
    // Not an adapter directory: no server is touched.
    std::fs::remove_file(other.join(ADAPTER_WEIGHTS)).unwrap();
    let r = sync(&other, "7");
    assert_eq!(r.code, 65, "{}", r.stderr);
    assert!(r.stderr.contains(ADAPTER_WEIGHTS), "{}", r.stderr);
    let r = sync(&base, "7");
    assert_eq!(r.code, 65, "{}", r.stderr);
    assert_eq!(server.get("/get_model_info").1["lora_adapters"]["a"]["weight_version"], "5");
}

/// The path `arl-sync` sends: the absolute one.
fn sync_abs(p: &Path) -> PathBuf {
    p.canonicalize().unwrap()
}

/// The prefix cache never hands one adapter's (or the base's) prompt KV to
/// another: the base's cached prompt is not reused under an adapter, an
/// adapter reuses its own, and a replaced adapter's is dropped. Each
/// answer's log-probs are its own checkpoint's.
#[test]
fn the_prefix_cache_never_crosses_adapters() {
    let base = tiny_model();
    let d = common::tmpdir();
    let cfg = LoraConfig::new(4, 8.0, 0.0, "q_proj,k_proj,v_proj,o_proj").unwrap();
    let (a, a2, ma, ma2) = (d.path().join("a"), d.path().join("a2"), d.path().join("ma"), d.path().join("ma2"));
    write_adapter(&base, &a, &cfg, 3, 1);
    write_adapter(&base, &a2, &cfg, 4, 1);
    write_merged(&base, &a, &ma);
    write_merged(&base, &a2, &ma2);
    let server = start(&base, &["--cpu-matmul", "blas"]);
    assert_eq!(load(&server, "a", &a, None).0, 200);
    let prompt: Vec<i64> = (0..200).map(|i| (i * 7) % 200 + 3).collect();
    let body = |lora: Value| {
        json!({"input_ids": prompt, "lora_path": lora, "return_logprob": true,
               "sampling_params": {"temperature": 1.0, "max_new_tokens": 8, "ignore_eos": true, "sampling_seed": 3}})
    };
    let cached = |v: &Value| v["meta_info"]["cached_tokens"].as_u64().unwrap();
    let check = |v: &Value, reference: &Path| {
        let out: Vec<(f64, i64)> = v["meta_info"]["output_token_logprobs"]
            .as_array()
            .unwrap()
            .iter()
            .map(|e| (e[0].as_f64().unwrap(), e[1].as_i64().unwrap()))
            .collect();
        let ids: Vec<i64> = prompt.iter().copied().chain(out.iter().map(|e| e.1)).collect();
        let want = score(reference, &ids);
        let got: Vec<f64> = out.iter().map(|e| e.0).collect();
        let diff = max_diff(&got, &want[want.len() - got.len()..]);
        assert!(diff < 1e-4, "max |server - {}| = {diff}", reference.display());
    };
    server.generate(body(json!(null)));
    let v = server.generate(body(json!(null)));
    assert!(cached(&v) > 0, "the base reuses its own prompt");
    check(&v, &base);
    let v = server.generate(body(json!("a")));
    assert_eq!(cached(&v), 0, "the base's prompt reused under an adapter");
    check(&v, &ma);
    let v = server.generate(body(json!("a")));
    assert!(cached(&v) > 0, "an adapter reuses its own prompt");
    check(&v, &ma);
    assert_eq!(load(&server, "a", &a2, None).0, 200);
    let v = server.generate(body(json!("a")));
    assert_eq!(cached(&v), 0, "the replaced adapter's prompt reused");
    check(&v, &ma2);
}
