//! A checkpoint as recent transformers saves it — the chat template only in
//! `chat_template.jinja` (here with Qwen3's `enable_thinking` tail), no
//! `chat_template` in `tokenizer_config.json`, a list of end-of-sequence ids
//! in `generation_config.json` — served (chat endpoint), rolled out and
//! trained on (SFT `messages`), each rendering the prompt arl-chat renders,
//! with the template variables of the request or of `--chat-template-kwargs`.
use arl_chat::template::ChatTemplate;
use arl_chat::tokenizer::Tokenizer;
use arl_testkit::common::{jsonl, run_in, tmpdir};
use arl_testkit::rollout_kit::{prompts_jsonl, StubSglang};
use arl_testkit::serve_util::Server;
use serde_json::{json, Value};
use std::path::Path;

const THINK_OFF: &str = "{%- if add_generation_prompt and enable_thinking is defined and enable_thinking is false %}\n    {{- '<think>\\n\\n</think>\\n\\n' }}\n{%- endif %}\n";

/// The tiny model with its template moved to `chat_template.jinja`.
fn jinja_only_checkpoint(dir: &Path) {
    std::fs::create_dir_all(dir).unwrap();
    let tiny = arl_testkit::tiny::model();
    for e in std::fs::read_dir(&tiny).unwrap() {
        let p = e.unwrap().path();
        std::fs::copy(&p, dir.join(p.file_name().unwrap())).unwrap();
    }
    let mut cfg: Value = serde_json::from_slice(&std::fs::read(dir.join("tokenizer_config.json")).unwrap()).unwrap();
    let template = cfg.as_object_mut().unwrap().remove("chat_template").unwrap();
    std::fs::write(dir.join("tokenizer_config.json"), cfg.to_string()).unwrap();
    std::fs::write(dir.join("chat_template.jinja"), template.as_str().unwrap().to_string() + THINK_OFF).unwrap();
    // <|endoftext|> and <|im_end|>, as a list.
    std::fs::write(dir.join("generation_config.json"), json!({"eos_token_id": [128, 130]}).to_string()).unwrap();
}

fn expected_prompt(dir: &Path, messages: &[Value], kwargs: &Value) -> (String, Vec<u32>) {
    let tok = Tokenizer::load(dir).unwrap();
    let text = ChatTemplate::from_tokenizer(&tok)
        .unwrap()
        .render_with(messages, None, true, kwargs.as_object().unwrap())
        .unwrap();
    let ids = tok.encode(&text).unwrap();
    (text, ids)
}

#[test]
fn a_chat_template_jinja_checkpoint_is_served_rolled_out_and_trained_on() {
    let t = tmpdir();
    let ck = t.path().join("ck");
    jinja_only_checkpoint(&ck);
    let tok = Tokenizer::load(&ck).unwrap();
    assert_eq!(arl_chat::tokenizer::eos_ids(&ck, &tok).unwrap(), vec![128, 130]);
    let off = json!({"enable_thinking": false});

    // arl-serve's chat endpoint, with the request's chat_template_kwargs.
    let messages = [json!({"role": "user", "content": "2+2?"})];
    let (text, ids) = expected_prompt(&ck, &messages, &off);
    assert!(text.ends_with("<|im_start|>assistant\n<think>\n\n</think>\n\n"), "{text:?}");
    let server = Server::start(&["--model-path", ck.to_str().unwrap(), "--cpu-threads", "1"]);
    let (code, v) = server.post(
        "/v1/chat/completions",
        &json!({"messages": messages, "max_tokens": 3, "temperature": 0, "chat_template_kwargs": off}),
    );
    assert_eq!(code, 200, "{v}");
    assert_eq!(v["usage"]["prompt_tokens"], json!(ids.len()), "{v}");
    drop(server);

    // arl-rollout with --chat-template-kwargs: the record's prompt tokens.
    let stub = StubSglang::start(&ck);
    let r = run_in(
        t.path(),
        "arl-rollout",
        &["--endpoint", &stub.url(), "--tokenizer", "ck", "--chat-template-kwargs", &off.to_string(), "-q"],
        prompts_jsonl(&["plain"]).as_bytes(),
    )
    .ok();
    let rec = &jsonl(&r.stdout)[0];
    let prompt = [json!({"role": "user", "content": "Task 0. SCRIPT:plain"})];
    let (_, want) = expected_prompt(&ck, &prompt, &off);
    let tokens: Vec<u32> = serde_json::from_value(rec["tokens"].clone()).unwrap();
    assert_eq!(rec["prompt_len"], json!(want.len()), "{rec}");
    assert_eq!(&tokens[..want.len()], want.as_slice());
    let bad = run_in(
        t.path(),
        "arl-rollout",
        &["--endpoint", &stub.url(), "--tokenizer", "ck", "--chat-template-kwargs", "[1]"],
        b"",
    );
    assert_eq!(bad.code, 2, "{}", bad.stderr);
    assert!(bad.stderr.contains("--chat-template-kwargs"), "{}", bad.stderr);

    // arl-train SFT on `messages`.
    let sft = json!({"messages": [{"role": "user", "content": "2+2?"}, {"role": "assistant", "content": "4"}]});
    let r = run_in(
        t.path(),
        "arl-train",
        &["--threads", "1", "-q", "--model", "ck", "--loss", "sft", "--metrics", "m.jsonl"],
        (sft.to_string() + "\n").as_bytes(),
    );
    assert_eq!(r.code, 0, "{}", r.stderr);
    let ms = jsonl(&std::fs::read(t.path().join("m.jsonl")).unwrap());
    assert!(ms[0]["loss"].as_f64().is_some_and(f64::is_finite), "{}", ms[0]);
    // Without any template, SFT says why for the record.
    std::fs::remove_file(ck.join("chat_template.jinja")).unwrap();
    let r = run_in(
        t.path(),
        "arl-train",
        &["--threads", "1", "--model", "ck", "--loss", "sft"],
        (sft.to_string() + "\n").as_bytes(),
    );
    assert!(r.stderr.contains("chat_template.jinja"), "{}", r.stderr);
}
