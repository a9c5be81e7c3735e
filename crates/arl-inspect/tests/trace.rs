//! `arl-inspect trace` through the binary: the summary, `--json`, the page
//! written whole (`-o`), `-q`, stdin, and a bad trace line refused with its
//! file, line and field (exit 65, no page). The end-to-end run (a traced
//! rollout, the page in Chromium) is `crates/arl-rollout/tests/trace.rs`.
use arl_testkit::common::{run_in, tmpdir};
use serde_json::Value;

/// One slot, two samples of one prompt: p0#1 waits for p0#0's request, fails
/// once, waits before its retry and finishes last.
const TRACE: &str = r#"{"type":"run","version":1,"start_unix":1.5,"start":"1970-01-01T00:00:01.500000Z","concurrency":1,"endpoints":["http://127.0.0.1:1"],"n_samples_per_prompt":2,"streaming":false}
{"type":"ready","t":0.1,"groups":1,"samples":2}
{"type":"sample_start","t":0.1,"sample":0,"prompt_id":"p0","sample_index":0}
{"type":"sample_start","t":0.1,"sample":1,"prompt_id":"p0","sample_index":1}
{"type":"request","sample":0,"turn":1,"attempt":0,"endpoint":0,"queued":0.1,"sent":0.1,"answered":1.1,"outcome":"ok","finish":"stop","prompt_tokens":5,"output_tokens":9}
{"type":"request","sample":1,"turn":1,"attempt":0,"endpoint":0,"queued":0.1,"sent":1.1,"answered":1.2,"outcome":"retry","finish":null,"prompt_tokens":5,"output_tokens":0,"error":"HTTP 503"}
{"type":"tool","sample":0,"turn":1,"name":"calculator","start":1.15,"end":1.35,"error":false}
{"type":"backoff","sample":1,"turn":1,"attempt":1,"start":1.2,"end":1.4}
{"type":"request","sample":0,"turn":2,"attempt":0,"endpoint":0,"queued":1.4,"sent":1.4,"answered":2.0,"outcome":"ok","finish":"stop","prompt_tokens":5,"output_tokens":9}
{"type":"sample_end","t":2.0,"sample":0,"status":"completed","turns":2,"tool_calls":1}
{"type":"request","sample":1,"turn":1,"attempt":1,"endpoint":0,"queued":1.4,"sent":2.0,"answered":3.0,"outcome":"ok","finish":"stop","prompt_tokens":5,"output_tokens":9}
{"type":"sample_end","t":3.05,"sample":1,"status":"completed","turns":1,"tool_calls":0}
{"type":"run_end","t":3.2,"outcome":"ok"}
"#;

#[test]
fn summary_json_page_and_quiet() {
    let d = tmpdir();
    let p = d.path();
    std::fs::write(p.join("t.jsonl"), TRACE).unwrap();

    let r = run_in(p, "arl-inspect", &["trace", "t.jsonl"], b"").ok();
    let text = r.stdout_str();
    assert!(
        text.starts_with(
            "t.jsonl: 2 samples (1 groups), --concurrency 1, started 1970-01-01T00:00:01.500000Z\nwall time 3.200 s\n"
        ),
        "{text}"
    );
    assert!(
        text.contains("critical path: sample p0#1 (finished last, at 3.050 s; completed, 1 turn, 0 tool calls)"),
        "{text}"
    );
    assert!(text.contains("  waiting for a request slot              1.600 s   50.0%\n"), "{text}");
    assert!(text.contains("  retries (failed tries, backoff)         0.300 s    9.4%\n"), "{text}");
    assert!(text.contains("  total                                   3.200 s  100.0%\n"), "{text}");
    assert!(text.contains("long tail: 90% of the samples had finished at 2.000 s; the last 1 took 1.050 s more (32.8% of the wall time): p0#1"), "{text}");
    assert!(r.stderr.is_empty(), "{}", r.stderr);

    // The same from stdin, as JSON.
    let r = run_in(p, "arl-inspect", &["trace", "-", "--json", "--top", "1"], TRACE.as_bytes()).ok();
    let v: Value = serde_json::from_slice(&r.stdout).unwrap();
    assert_eq!(v["source"], "<stdin>");
    assert_eq!(v["wall"], 3.2);
    assert_eq!(v["critical_path"]["sample"]["sample_index"], 1);
    let total: f64 = v["critical_path"]["phases"].as_object().unwrap().values().map(|x| x.as_f64().unwrap()).sum();
    assert!((total - 3.2).abs() < 1e-9, "{v:#}");
    assert_eq!(v["slowest"].as_array().unwrap().len(), 1);

    // `-o`: the page, and with `-q` nothing else.
    let r = run_in(p, "arl-inspect", &["trace", "t.jsonl", "-o", "t.html", "-q"], b"").ok();
    assert!(r.stdout.is_empty() && r.stderr.is_empty(), "{r:?}");
    let page = std::fs::read_to_string(p.join("t.html")).unwrap();
    assert!(page.starts_with("<!DOCTYPE html>") && page.ends_with("</html>"));
    // Two samples' lanes; one slot lane holding all four attempts (one with its backoff).
    assert_eq!(
        page.matches(r#"<text class="lane" x="4""#).count() + page.matches(r#"<text class="lane crit""#).count(),
        3
    );
    assert!(page.contains("<title>turn 1, attempt 0: retry, 0.100 s, 0 tokens (HTTP 503)</title>"));
    let leftovers: Vec<_> = std::fs::read_dir(p).unwrap().filter_map(|e| e.ok()).map(|e| e.file_name()).collect();
    assert_eq!(leftovers.len(), 2, "{leftovers:?}");
}

#[test]
fn a_bad_line_names_file_line_and_field_and_writes_no_page() {
    let d = tmpdir();
    let p = d.path();
    let bad = TRACE.replace(r#""sent":1.4,"answered":2.0"#, r#""sent":1.4,"answered":"late""#);
    std::fs::write(p.join("bad.jsonl"), bad).unwrap();
    let r = run_in(p, "arl-inspect", &["trace", "bad.jsonl", "-o", "t.html"], b"");
    assert_eq!(r.code, 65, "{}", r.stderr);
    assert_eq!(r.stderr, "arl-inspect: error: `bad.jsonl:9`: field `answered`: expected a number of seconds (≥ 0)\n");
    assert!(!p.join("t.html").exists());
    assert!(r.stdout.is_empty());

    // Not a trace at all: a record file.
    std::fs::write(p.join("recs.jsonl"), "{\"prompt_id\": \"p0\"}\n").unwrap();
    let r = run_in(p, "arl-inspect", &["trace", "recs.jsonl"], b"");
    assert_eq!(r.code, 65, "{}", r.stderr);
    assert!(r.stderr.contains("`recs.jsonl:1`: field `type`: expected a string"), "{}", r.stderr);
}
