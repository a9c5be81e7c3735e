//! `arl-rollout` with a model whose chat template has no tool section
//! (SmolLM2's) and Llama 3 JSON tool calls (`--tool-call-parser llama3`):
//! the tools reach the model in the tool header, its calls are run, and the
//! flags' bad values are refused. The server is the STAND-IN SGLang server of
//! `rollout_kit`.
use arl_testkit::common::{jsonl, run_in, run_in_env, tmpdir};
use arl_testkit::rollout_kit::*;

fn decode(model: &std::path::Path, ids: &[u32]) -> String {
    arl_chat::tokenizer::Tokenizer::load(model).unwrap().decode(ids)
}

#[test]
fn llama3_calls_with_a_tool_header() {
    let t = tmpdir();
    let model = t.path().join("model");
    write_model_dir(&model, SMOLLM2_TEMPLATE);
    let stub = StubSglang::start(&model);
    let url = stub.url();
    let input = prompts_jsonl(&["llama"]);
    let args = |parser: &'static str| {
        vec!["--endpoint", url.as_str(), "--tokenizer", "model", "--tools", "calculator", "--tool-call-parser", parser]
    };
    let r = run_in(t.path(), "arl-rollout", &args("llama3"), input.as_bytes()).ok();
    let recs = jsonl(&r.stdout);
    assert_eq!(recs.len(), 1, "{}", r.stderr);
    let rec = &recs[0];
    let calls = "{\"name\": \"calculator\", \"parameters\": {\"expression\": \"347*29\"}}; {\"name\": \"calculator\", \"parameters\": {\"expression\": \"2**10\"}}";
    assert_eq!(
        rec["response"].as_str().unwrap(),
        format!(
            "{calls}<|im_end|>\n<|im_start|>tool\n10063<|im_end|>\n<|im_start|>tool\n1024<|im_end|>\n<|im_start|>assistant\nThe answer is 10063.<|im_end|>"
        )
    );
    assert_eq!(
        (rec["status"].as_str(), rec["turns"].as_u64(), rec["tool_calls"].as_u64()),
        (Some("completed"), Some(2), Some(2))
    );
    assert_eq!(rec["metadata"]["tool_errors"], 0);
    // The prompt: the header as the system message (the template's default
    // one gives way), the calculator's definition, the llama3 call format.
    let prompt = {
        let log = stub.state.log.lock().unwrap();
        decode(&model, &log[0].0)
    };
    assert!(prompt.starts_with("<|im_start|>system\nYou can call tools."), "{prompt}");
    assert!(prompt.contains("\n{\"type\": \"function\", \"function\": {\"name\": \"calculator\""), "{prompt}");
    assert!(
        prompt.contains("{\"name\": \"TOOL_NAME\", \"parameters\": {\"ARGUMENT\": \"VALUE\"}}<|im_end|>"),
        "{prompt}"
    );
    assert!(prompt.ends_with("<|im_start|>user\nTask 0. SCRIPT:llama<|im_end|>\n<|im_start|>assistant\n"));
    assert!(!prompt.contains("SmolLM"));

    // The same model text is no call in the default (qwen25) format, whose
    // header asks for `<tool_call>` blocks.
    let before = stub.state.log.lock().unwrap().len();
    let r = run_in(t.path(), "arl-rollout", &args("qwen25"), input.as_bytes()).ok();
    let rec = &jsonl(&r.stdout)[0];
    assert_eq!((rec["turns"].as_u64(), rec["tool_calls"].as_u64()), (Some(1), Some(0)), "{rec}");
    let prompt = decode(&model, &stub.state.log.lock().unwrap()[before].0);
    assert!(prompt.contains("<tool_call>\n{\"name\": \"TOOL_NAME\", \"arguments\""), "{prompt}");

    // `--tool-header FILE` replaces the header; the mode (here from the
    // environment) turns it off.
    std::fs::write(
        t.path().join("header.j2"),
        "Tools: {% for t in tools %}{{ t.function.name }}{% endfor %}. {{ parser }}",
    )
    .unwrap();
    let mut a = args("llama3");
    a.extend(["--tool-header", "header.j2"]);
    let before = stub.state.log.lock().unwrap().len();
    run_in(t.path(), "arl-rollout", &a, input.as_bytes()).ok();
    let prompt = decode(&model, &stub.state.log.lock().unwrap()[before].0);
    assert!(
        prompt.starts_with("<|im_start|>system\nTools: calculator. llama3<|im_end|>\n<|im_start|>user\n"),
        "{prompt}"
    );
    let before = stub.state.log.lock().unwrap().len();
    run_in_env(t.path(), "arl-rollout", &a, input.as_bytes(), &[("ARL_TOOL_HEADER_MODE", "off")]).ok();
    let prompt = decode(&model, &stub.state.log.lock().unwrap()[before].0);
    assert!(prompt.starts_with("<|im_start|>system\nYou are a helpful AI assistant named SmolLM"), "{prompt}");
    assert!(!prompt.contains("calculator"));
}

#[test]
fn bad_parser_and_header_flags_are_refused() {
    let t = tmpdir();
    write_model_dir(&t.path().join("model"), SMOLLM2_TEMPLATE);
    let input = prompts_jsonl(&["plain"]);
    let base = ["--endpoint", "http://127.0.0.1:9", "--tokenizer", "model", "--tools", "calculator"];
    let run = |extra: &[&str]| {
        let mut a = base.to_vec();
        a.extend_from_slice(extra);
        run_in(t.path(), "arl-rollout", &a, input.as_bytes())
    };
    let r = run(&["--tool-call-parser", "llama4"]);
    assert_eq!(r.code, 2, "{}", r.stderr);
    assert!(r.stderr.contains("--tool-call-parser") && r.stderr.contains("llama3"), "{}", r.stderr);
    let r = run(&["--tool-header", "missing.j2"]);
    assert_eq!(r.code, 2, "{}", r.stderr);
    assert!(r.stderr.contains("`--tool-header missing.j2`: cannot read it"), "{}", r.stderr);
    std::fs::write(t.path().join("bad.j2"), "{% for t in tools %}").unwrap();
    let r = run(&["--tool-header", "bad.j2"]);
    assert_eq!(r.code, 65, "{}", r.stderr);
    assert!(r.stderr.contains("`--tool-header bad.j2`"), "{}", r.stderr);
}
