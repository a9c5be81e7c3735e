//! `arl-serve` on the real tiny model (CPU, float32): SGLang's conformance
//! checks, log-prob agreement with the shared model's scoring forward,
//! batching invariance, weight updates from disk, and abort_all.
use arl_testkit::common;
use arl_testkit::serve_util;

use serde_json::{json, Value};
use serve_util::Server;
use std::path::{Path, PathBuf};
use tch::{Device, Kind, Tensor};

/// `testdata/tiny-model`, or `ARL_TEST_MODEL`.
fn tiny_model() -> PathBuf {
    std::env::var_os("ARL_TEST_MODEL").map(PathBuf::from).unwrap_or_else(arl_testkit::tiny::model)
}

fn start(model: &Path) -> Server {
    start_with(model, &[])
}

fn start_with(model: &Path, extra: &[&str]) -> Server {
    let m = model.display().to_string();
    let mut args = vec!["--model-path", &m, "--device", "cpu", "--dtype", "float32", "--random-seed", "1"];
    args.extend_from_slice(extra);
    Server::start(&args)
}

/// Both CPU matrix-multiply paths, whatever `auto` would pick on this machine.
const MATMULS: [&str; 2] = ["blas", "onednn"];

fn lps(v: &Value, key: &str) -> Vec<(Option<f64>, u64)> {
    v["meta_info"][key].as_array().unwrap().iter().map(|e| (e[0].as_f64(), e[1].as_u64().unwrap())).collect()
}

#[test]
fn sglang_logprob_conformance_checks() {
    let s = start(&tiny_model());
    for (l, start, k, new) in [(12usize, 0usize, 5usize, 8usize), (20, 7, 3, 5), (5, 4, 1, 3)] {
        let v = s.generate(json!({
            "input_ids": (0..l).collect::<Vec<_>>(), "return_logprob": true, "logprob_start_len": start, "top_logprobs_num": k,
            "sampling_params": {"temperature": 0, "max_new_tokens": new, "ignore_eos": true}}));
        let m = &v["meta_info"];
        assert_eq!(m["prompt_tokens"], l);
        assert_eq!(m["completion_tokens"], new);
        let out = lps(&v, "output_token_logprobs");
        let inp = lps(&v, "input_token_logprobs");
        assert_eq!(out.len(), new);
        assert_eq!(inp.len() + start, l);
        assert!(inp[0].0.is_none());
        assert_eq!(m["input_top_logprobs"].as_array().unwrap().len() + start, l);
        let tops = m["output_top_logprobs"].as_array().unwrap();
        assert_eq!(tops.len(), new);
        for (i, t) in tops.iter().enumerate() {
            assert_eq!(t.as_array().unwrap().len(), k);
            // Greedy: the sampled token is the top-1 entry (or ties with it).
            assert!((t[0][0].as_f64().unwrap() - out[i].0.unwrap()).abs() < 1e-6, "step {i}: {t} vs {:?}", out[i]);
        }
        for t in m["input_top_logprobs"].as_array().unwrap().iter().skip(1) {
            assert_eq!(t.as_array().unwrap().len(), k);
        }
    }
}

/// Log-probs of `ids[1..]` under `log_softmax(forward(ids) / t)`, the trainer's view.
fn score(model_dir: &Path, ids: &[i64], t: f64) -> Vec<f64> {
    let _g = tch::no_grad_guard();
    let model = arl_model::Model::load(model_dir, Device::Cpu, Kind::Float).unwrap();
    let x = Tensor::from_slice(ids).view([1, -1]);
    let logits = model.forward(&x, None).to_kind(Kind::Float);
    let lp = (logits / t).log_softmax(-1, Kind::Float).squeeze_dim(0);
    (1..ids.len()).map(|i| lp.double_value(&[i as i64 - 1, ids[i]])).collect()
}

/// Both matrix-multiply paths (`--cpu-matmul`): the prompt's rows go
/// through oneDNN with `onednn`, the one-row decode steps through BLAS.
#[test]
fn server_logprobs_match_the_training_forward() {
    let model = tiny_model();
    for how in MATMULS {
        let s = start_with(&model, &["--cpu-matmul", how]);
        assert_eq!(s.get("/get_server_info").1["cpu_matmul"], how);
        logprobs_match_the_training_forward(&s, &model, how);
    }
}

fn logprobs_match_the_training_forward(s: &Server, model: &Path, how: &str) {
    let prompt: Vec<i64> = (3..40).collect();
    for (t, top_p, top_k) in [(0.7, 0.8, 20), (1.0, 1.0, -1), (1.3, 0.95, 50)] {
        let v = s.generate(json!({
            "input_ids": prompt, "return_logprob": true, "logprob_start_len": 0,
            "sampling_params": {"temperature": t, "top_p": top_p, "top_k": top_k, "max_new_tokens": 24, "ignore_eos": true, "sampling_seed": 7}}));
        let out = lps(&v, "output_token_logprobs");
        let inp = lps(&v, "input_token_logprobs");
        let mut all = prompt.clone();
        all.extend(out.iter().map(|e| e.1 as i64));
        let want = score(model, &all, t);
        let mut worst = 0.0f64;
        for (i, e) in inp.iter().enumerate().skip(1) {
            worst = worst.max((e.0.unwrap() - want[i - 1]).abs());
        }
        for (j, e) in out.iter().enumerate() {
            worst = worst.max((e.0.unwrap() - want[prompt.len() - 1 + j]).abs());
        }
        assert!(worst < 1e-4, "{how}, temperature {t}: max |server - trainer| = {worst}");
        eprintln!("{how}: temperature {t} top_p {top_p} top_k {top_k}: max |Δ logprob| = {worst:.2e}");
    }
}

#[test]
fn batching_and_seeds_do_not_change_results() {
    let s = start(&tiny_model());
    let prompts: Vec<Vec<u64>> = (0..6).map(|i| (i..i + 5 + 3 * i).collect()).collect();
    let greedy = json!({"temperature": 0, "max_new_tokens": 12, "ignore_eos": true});
    let alone: Vec<Value> = prompts
        .iter()
        .map(|p| s.generate(json!({"input_ids": p, "sampling_params": greedy}))["output_ids"].clone())
        .collect();
    let batch = s.generate(json!({"input_ids": prompts, "sampling_params": greedy}));
    for (i, b) in batch.as_array().unwrap().iter().enumerate() {
        assert_eq!(b["output_ids"], alone[i], "prompt {i}: batched greedy differs from alone");
    }
    let seeded = json!({"input_ids": prompts[2], "sampling_params": {"temperature": 1.0, "max_new_tokens": 12, "sampling_seed": 3}});
    assert_eq!(s.generate(seeded.clone())["output_ids"], s.generate(seeded)["output_ids"]);
}

/// A copy of the tiny model with every floating tensor nudged (seeded: with
/// unseeded noise of 0.05 the greedy output sometimes stayed the same).
fn perturbed_copy(src: &Path, dst: &Path) {
    tch::manual_seed(5);
    std::fs::create_dir_all(dst).unwrap();
    for e in std::fs::read_dir(src).unwrap() {
        let e = e.unwrap();
        let name = e.file_name().into_string().unwrap();
        if e.path().is_file() && !name.ends_with(".safetensors") {
            std::fs::copy(e.path(), dst.join(&name)).unwrap();
        } else if name.ends_with(".safetensors") {
            let ts = Tensor::read_safetensors(e.path()).unwrap();
            let mut gen = arl_core::rng::Rng::new(5);
            let out: Vec<(String, Tensor)> = ts
                .into_iter()
                .map(|(n, t)| {
                    let noise = Tensor::randn(t.size(), (Kind::Float, Device::Cpu)) * (0.3 + 0.01 * gen.f64());
                    let t2 = (t.to_kind(Kind::Float) + noise).to_kind(t.kind());
                    (n, t2)
                })
                .collect();
            Tensor::write_safetensors(&out, dst.join(&name)).unwrap();
        }
    }
}

/// With `--cpu-matmul onednn` too: its packed copies of the weights must
/// follow the update (the prompt's log-probs, computed through them, are
/// the new model's).
#[test]
fn update_weights_from_disk_changes_and_restores_greedy_output() {
    let model = tiny_model();
    let d = common::tmpdir();
    let other = d.path().join("other");
    perturbed_copy(&model, &other);
    for how in MATMULS {
        update_weights(&start_with(&model, &["--cpu-matmul", how]), &model, &other, d.path(), how);
    }
}

fn update_weights(s: &Server, model: &Path, other: &Path, d: &Path, how: &str) {
    let req = json!({"input_ids": [5, 6, 7, 8, 9, 10], "sampling_params": {"temperature": 0, "max_new_tokens": 16, "ignore_eos": true}});
    let base = s.generate(req.clone())["output_ids"].clone();
    let (code, v) =
        s.post("/update_weights_from_disk", &json!({"model_path": other.display().to_string(), "weight_version": "2"}));
    assert_eq!((code, v["success"].clone()), (200, json!(true)), "{v}");
    let changed = s.generate(req.clone());
    assert_ne!(changed["output_ids"], base, "{how}: new weights, same greedy output");
    let prompt: Vec<i64> = (3..20).collect();
    let v = s.generate(json!({"input_ids": prompt, "return_logprob": true, "logprob_start_len": 0,
                              "sampling_params": {"temperature": 1.0, "max_new_tokens": 1}}));
    let want = score(other, &prompt, 1.0);
    for (i, e) in lps(&v, "input_token_logprobs").iter().enumerate().skip(1) {
        let diff = (e.0.unwrap() - want[i - 1]).abs();
        assert!(diff < 1e-4, "{how}: prompt position {i} after the update: |server - new model| = {diff}");
    }
    assert_eq!(changed["meta_info"]["weight_version"], "2");
    assert_eq!(s.get("/get_model_info").1["model_path"], other.display().to_string());
    let (code, v) =
        s.post("/update_weights_from_disk", &json!({"model_path": model.display().to_string(), "weight_version": "3"}));
    assert_eq!((code, v["success"].clone()), (200, json!(true)), "{v}");
    assert_eq!(s.generate(req.clone())["output_ids"], base, "restoring the weights restores the output");
    let (code, v) = s.post(
        "/update_weights_from_disk",
        &json!({"model_path": d.join("missing").display().to_string(), "weight_version": "4"}),
    );
    assert_eq!((code, v["success"].clone()), (400, json!(false)), "{v}");
    assert_eq!(s.generate(req)["output_ids"], base);
    assert_eq!(s.get("/get_model_info").1["weight_version"], "3");
}

#[test]
fn abort_all_requests_during_16_long_generations() {
    let s = start(&tiny_model());
    let ctx = s.get("/get_server_info").1["context_length"].as_u64().unwrap();
    let url = s.url.clone();
    let handles: Vec<_> = (0..16u64)
        .map(|i| {
            let u = url.clone();
            let body = json!({"input_ids": [i + 1, i + 2], "sampling_params": {"max_new_tokens": ctx - 3, "ignore_eos": true}});
            std::thread::spawn(move || serve_util::post(&format!("{u}/generate"), &body))
        })
        .collect();
    std::thread::sleep(std::time::Duration::from_millis(500));
    let model = tiny_model().display().to_string();
    let (code, v) = s.post(
        "/update_weights_from_disk",
        &json!({"model_path": model, "weight_version": "9", "abort_all_requests": true}),
    );
    assert_eq!((code, v["success"].clone()), (200, json!(true)), "{v}");
    for h in handles {
        let (code, v) = h.join().unwrap();
        assert_eq!(code, 200);
        assert_eq!(v["meta_info"]["finish_reason"]["type"], "abort", "{}", v["meta_info"]["finish_reason"]);
    }
}

/// `--dp-size 2`: two replicas behind one port answer exactly as one server
/// does (greedy ids and log-probs), both take work, and abort_all, weight
/// updates (good and bad) and the version reach both.
#[test]
fn data_parallel_replicas_answer_like_one_server() {
    let model = tiny_model();
    let d = common::tmpdir();
    let other = d.path().join("other");
    perturbed_copy(&model, &other);
    let one = start(&model);
    let m = model.display().to_string();
    let two = Server::start(&[
        "--model-path",
        &m,
        "--device",
        "cpu",
        "--dtype",
        "float32",
        "--random-seed",
        "1",
        "--dp-size",
        "2",
    ]);
    let info = two.get("/get_server_info").1;
    assert_eq!(info["dp_size"], 2);
    assert_eq!(info["internal_states"].as_array().unwrap().len(), 2, "{info}");
    let body = |i: u64, new: u64| {
        json!({"input_ids": (i..i + 3 + i % 5).collect::<Vec<_>>(), "return_logprob": true,
               "sampling_params": {"temperature": 0, "max_new_tokens": new, "ignore_eos": true}})
    };
    // Concurrent requests, spread over both replicas.
    let concurrently = |s: &Server, bodies: Vec<Value>| -> Vec<Value> {
        let url = format!("{}/generate", s.url);
        let hs: Vec<_> = bodies
            .into_iter()
            .map(|b| {
                let u = url.clone();
                std::thread::spawn(move || serve_util::post(&u, &b))
            })
            .collect();
        hs.into_iter()
            .map(|h| {
                let (code, v) = h.join().unwrap();
                assert_eq!(code, 200, "{v}");
                v
            })
            .collect()
    };
    let got = concurrently(&two, (0..12).map(|i| body(i, 10)).collect());
    for (i, g) in got.iter().enumerate() {
        let want = one.generate(body(i as u64, 10));
        assert_eq!(g["output_ids"], want["output_ids"], "request {i}");
        for (a, b) in lps(g, "output_token_logprobs").iter().zip(lps(&want, "output_token_logprobs")) {
            assert!((a.0.unwrap() - b.0.unwrap()).abs() < 1e-5, "request {i}: {a:?} vs {b:?}");
        }
    }
    // 16 long generations: both replicas run some; abort_all with an update ends them all.
    let ctx = info["context_length"].as_u64().unwrap();
    let url = two.url.clone();
    let long: Vec<_> = (0..16u64)
        .map(|i| {
            let u = format!("{url}/generate");
            let b = json!({"input_ids": [i + 1, i + 2], "sampling_params": {"max_new_tokens": ctx - 3, "ignore_eos": true}});
            std::thread::spawn(move || serve_util::post(&u, &b))
        })
        .collect();
    let mut busy = vec![];
    for _ in 0..100 {
        std::thread::sleep(std::time::Duration::from_millis(50));
        let states = two.get("/get_server_info").1["internal_states"].clone();
        busy = states.as_array().unwrap().iter().map(|s| s["num_reqs"].as_u64().unwrap()).collect();
        if busy.iter().sum::<u64>() == 16 {
            break;
        }
    }
    assert!(
        busy.len() == 2 && busy.iter().all(|&n| n >= 4) && busy.iter().sum::<u64>() == 16,
        "requests per replica: {busy:?}"
    );
    let (code, v) = two.post(
        "/update_weights_from_disk",
        &json!({"model_path": other.display().to_string(), "weight_version": "2", "abort_all_requests": true}),
    );
    assert_eq!((code, v["success"].clone()), (200, json!(true)), "{v}");
    for h in long {
        let (code, v) = h.join().unwrap();
        assert_eq!((code, v["meta_info"]["finish_reason"]["type"].clone()), (200, json!("abort")), "{v}");
    }
    // Every replica now runs the new weights and says so.
    let base = one.generate(body(3, 12))["output_ids"].clone();
    let after = concurrently(&two, (0..6).map(|_| body(3, 12)).collect());
    for a in &after {
        assert_ne!(a["output_ids"], base, "a replica kept the old weights");
        assert_eq!(a["meta_info"]["weight_version"], "2");
        assert_eq!(a["output_ids"], after[0]["output_ids"]);
    }
    assert_eq!(two.get("/get_model_info").1["weight_version"], "2");
    // A bad path fails everywhere and changes nothing; restoring restores.
    let (code, v) = two.post(
        "/update_weights_from_disk",
        &json!({"model_path": d.path().join("missing").display().to_string(), "weight_version": "3"}),
    );
    assert_eq!((code, v["success"].clone()), (400, json!(false)), "{v}");
    assert_eq!(two.get("/get_model_info").1["weight_version"], "2");
    let (code, v) = two.post("/update_weights_from_disk", &json!({"model_path": m, "weight_version": "4"}));
    assert_eq!((code, v["success"].clone()), (200, json!(true)), "{v}");
    for a in concurrently(&two, (0..6).map(|_| body(3, 12)).collect()) {
        assert_eq!(a["output_ids"], base, "restoring the weights restores every replica's output");
        assert_eq!(a["meta_info"]["weight_version"], "4");
    }
}

/// A 300-token prompt over the tiny model's vocabulary.
fn long_prompt(salt: u64) -> Vec<u64> {
    (0..300).map(|i| (i * 7 + salt * 13) % 200 + 3).collect()
}

fn sampled(ids: &Value, tokens: u64) -> Value {
    json!({"input_ids": ids, "return_logprob": true,
           "sampling_params": {"temperature": 1.0, "max_new_tokens": tokens, "ignore_eos": true, "sampling_seed": 7}})
}

/// Output ids and their log-probs of each item of an answer (one or a batch).
fn outputs(v: &Value) -> Vec<(Vec<u64>, Vec<f64>)> {
    let items = v.as_array().cloned().unwrap_or_else(|| vec![v.clone()]);
    items
        .iter()
        .map(|x| lps(x, "output_token_logprobs").into_iter().map(|(lp, id)| (id, lp.unwrap())).unzip())
        .collect()
}

fn cached(v: &Value) -> Vec<u64> {
    let items = v.as_array().cloned().unwrap_or_else(|| vec![v.clone()]);
    items.iter().map(|x| x["meta_info"]["cached_tokens"].as_u64().unwrap()).collect()
}

/// The same tokens, and log-probs within 1e-5.
fn same_outputs(a: &Value, b: &Value, what: &str) {
    for (i, ((ia, la), (ib, lb))) in outputs(a).into_iter().zip(outputs(b)).enumerate() {
        assert_eq!(ia, ib, "{what}: item {i}: tokens differ");
        let d = la.iter().zip(&lb).map(|(x, y)| (x - y).abs()).fold(0.0, f64::max);
        assert!(d < 1e-5, "{what}: item {i}: max |Δ log-prob| = {d}");
    }
}

/// The prefix cache changes the work, never the answer: a group of 8
/// samples of one prompt prefills it once (the other 7 copy it), the
/// next turn of an episode reuses its whole history, `/flush_cache` empties
/// it, and every answer equals the server without a cache.
#[test]
fn prefix_cache_changes_the_work_not_the_answers() {
    let model = tiny_model();
    let on = start(&model);
    let off = start_with(&model, &["--disable-radix-cache"]);
    let p = long_prompt(0);
    let group = sampled(&json!(vec![p.clone(); 8]), 12);
    let (a, b) = (on.generate(group.clone()), off.generate(group));
    same_outputs(&a, &b, "a group of 8");
    assert_eq!(cached(&b), vec![0; 8]);
    let c = cached(&a);
    assert_eq!(c.iter().filter(|&&n| n == p.len() as u64 - 1).count(), 7, "7 samples copy the prompt: {c:?}");
    // The next turn: the history (prompt, the answer) and a tool's output.
    let (out0, _) = outputs(&a).remove(0);
    let mut turn2 = p.clone();
    turn2.extend(&out0);
    turn2.extend(40..60);
    let (a2, b2) = (on.generate(sampled(&json!(turn2), 8)), off.generate(sampled(&json!(turn2), 8)));
    same_outputs(&a2, &b2, "the next turn");
    assert!(cached(&a2)[0] >= (p.len() + out0.len() - 1) as u64, "{:?}", cached(&a2));
    let metrics = on.get("/metrics").1.as_str().unwrap_or_default().to_string();
    let line = metrics.lines().find(|l| l.starts_with("sglang:cache_hit_rate")).unwrap().to_string();
    assert!(!line.ends_with(" 0"), "{line}");
    // Flushed: nothing is reused.
    assert_eq!(on.get("/flush_cache").0, 200);
    assert_eq!(cached(&on.generate(sampled(&json!(turn2), 8))), vec![0]);
}

/// After a weight update no prefix computed with the old weights is
/// served: the answer is the new model's, as a fresh server without a cache
/// gives it.
#[test]
fn a_weight_update_never_serves_a_stale_prefix() {
    let model = tiny_model();
    let d = common::tmpdir();
    let other = d.path().join("other");
    perturbed_copy(&model, &other);
    let on = start(&model);
    let p = json!(long_prompt(1));
    on.generate(sampled(&p, 4));
    assert!(cached(&on.generate(sampled(&p, 4)))[0] > 0, "the prompt is cached");
    let (code, v) = on.post("/update_weights_from_disk", &json!({"model_path": other.display().to_string()}));
    assert_eq!(code, 200, "{v}");
    let after = on.generate(sampled(&p, 12));
    assert_eq!(cached(&after), vec![0], "a prefix of the old weights was reused");
    same_outputs(&after, &start_with(&other, &["--disable-radix-cache"]).generate(sampled(&p, 12)), "after the update");
}

/// `--prefix-cache-slots 1`: one finished sequence is kept, the least
/// recently used goes.
#[test]
fn the_prefix_cache_evicts_beyond_its_bound() {
    let on = start_with(&tiny_model(), &["--prefix-cache-slots", "1"]);
    let (a, b) = (json!(long_prompt(2)), json!(long_prompt(3)));
    on.generate(sampled(&a, 2));
    assert!(cached(&on.generate(sampled(&a, 2)))[0] > 0);
    on.generate(sampled(&b, 2));
    assert_eq!(cached(&on.generate(sampled(&a, 2))), vec![0], "a was evicted by b");
    assert!(cached(&on.generate(sampled(&a, 2)))[0] > 0, "a is kept again");
}
