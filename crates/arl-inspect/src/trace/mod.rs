//! `arl-inspect trace`: reads a rollout trace (`arl-rollout --trace`, its
//! format in [`arl_core::trace`]), says where the run's wall time went and
//! draws the run as a timeline (one self-contained HTML page).
//!
//! The wall time is attributed along the critical path: the sample that
//! finished last. Its time splits into what came before it started (the
//! rollout's start-up, then its group waiting for its turn), its own phases
//! (waiting for a `--concurrency` slot, generation, tool calls, retries,
//! aborted generation, and the rollout's own work between them), and what
//! came after it (writing the output). These segments partition the wall
//! time, so they add up to it.
//!
//! `parse` reads the trace into samples and their spans, `summary` does the
//! attribution and writes it as text or JSON, `html` draws the page.
mod html;
mod parse;
mod summary;

pub use html::html;
pub use parse::Trace;
pub use summary::{summarize, text, to_json};

#[cfg(test)]
mod tests {
    use super::html::slot_lanes;
    use super::summary::Phase;
    use super::*;
    use arl_core::cli;

    /// Two samples, one slot: b waits for a's request, a has a tool call, b
    /// retries once.
    fn example() -> String {
        [
            r#"{"type":"run","version":1,"start_unix":0,"start":"1970-01-01T00:00:00.000000Z","concurrency":1,"endpoints":["x"],"n_samples_per_prompt":2,"streaming":false}"#,
            r#"{"type":"ready","t":0.1,"groups":1,"samples":2}"#,
            r#"{"type":"sample_start","t":0.1,"sample":0,"prompt_id":"p0","sample_index":0}"#,
            r#"{"type":"sample_start","t":0.1,"sample":1,"prompt_id":"p0","sample_index":1}"#,
            r#"{"type":"request","sample":0,"turn":1,"attempt":0,"endpoint":0,"queued":0.1,"sent":0.1,"answered":1.1,"outcome":"ok","finish":"stop","prompt_tokens":5,"output_tokens":9}"#,
            r#"{"type":"request","sample":1,"turn":1,"attempt":0,"endpoint":0,"queued":0.1,"sent":1.1,"answered":1.2,"outcome":"retry","finish":null,"prompt_tokens":5,"output_tokens":0,"error":"HTTP 503"}"#,
            r#"{"type":"tool","sample":0,"turn":1,"name":"calculator","start":1.15,"end":1.35,"error":false}"#,
            r#"{"type":"backoff","sample":1,"turn":1,"attempt":1,"start":1.2,"end":1.4}"#,
            r#"{"type":"request","sample":0,"turn":2,"attempt":0,"endpoint":0,"queued":1.4,"sent":1.4,"answered":2.0,"outcome":"ok","finish":"stop","prompt_tokens":5,"output_tokens":9}"#,
            r#"{"type":"sample_end","t":2.0,"sample":0,"status":"completed","turns":2,"tool_calls":1}"#,
            r#"{"type":"request","sample":1,"turn":1,"attempt":1,"endpoint":0,"queued":1.4,"sent":2.0,"answered":3.0,"outcome":"ok","finish":"stop","prompt_tokens":5,"output_tokens":9}"#,
            r#"{"type":"sample_end","t":3.05,"sample":1,"status":"completed","turns":1,"tool_calls":0}"#,
            r#"{"type":"run_end","t":3.2,"outcome":"ok"}"#,
        ]
        .join("\n")
    }

    fn close(a: f64, b: f64) -> bool {
        (a - b).abs() < 1e-9
    }

    #[test]
    fn the_critical_path_partitions_the_wall_time() {
        let t = Trace::parse(&example(), "t.jsonl").unwrap();
        let s = summarize(&t);
        assert!(close(s.wall, 3.2));
        assert_eq!(s.critical, Some(1));
        let get = |p: Phase| s.path.iter().find(|x| x.0 == p).map_or(0.0, |x| x.1);
        assert!(close(get(Phase::Startup), 0.1));
        assert!(close(get(Phase::GroupWait), 0.0));
        // queued 0.1 → sent 1.1, then queued 1.4 → sent 2.0
        assert!(close(get(Phase::SlotWait), 1.0 + 0.6), "{:?}", s.path);
        assert!(close(get(Phase::Retry), 0.1 + 0.2));
        assert!(close(get(Phase::Generation), 1.0));
        assert!(close(get(Phase::Client), 0.05));
        assert!(close(get(Phase::Finish), 0.15));
        assert!(close(s.path.iter().map(|x| x.1).sum::<f64>(), 3.2));
        // One slot: the failed attempt and its backoff share a lane with the rest.
        assert_eq!(slot_lanes(&t.slots), vec![0, 0, 0, 0]);
        assert!(close(s.slot_busy, 1.0 + 0.1 + 0.2 + 0.6 + 1.0));
        assert_eq!(s.slowest, vec![1, 0]);
        assert_eq!(s.tail.as_ref().map(|x| x.1.clone()), Some(vec![1]));
        let txt = text(&t, &s, 5);
        assert!(txt.contains("critical path: sample p0#1"), "{txt}");
        let h = html(&t, &s, 5);
        assert!(h.contains(r#"data-name="p0#1 — ""#));
        assert!(!h.contains("src=") && !h.contains("href=\"http") && !h.contains("url("), "no external resources");
    }

    #[test]
    fn bad_lines_name_the_file_line_and_field() {
        let mut lines: Vec<String> = example().lines().map(str::to_string).collect();
        lines[4] = lines[4].replace(r#""sent":0.1"#, r#""sent":"soon""#);
        let e = Trace::parse(&lines.join("\n"), "t.jsonl").unwrap_err();
        assert_eq!(e.to_string(), "`t.jsonl:5`: field `sent`: expected a number of seconds (≥ 0)");
        assert_eq!(cli::exit_code_of(&e), cli::exit::DATA);
        let e = Trace::parse("{\"type\":\"ready\",\"t\":1}\n", "x").unwrap_err();
        assert!(e.to_string().contains("`x:1`: not a rollout trace"), "{e}");
        let e = Trace::parse(
            &example().replace(
                r#""sample":1,"turn":1,"attempt":1,"endpoint""#,
                r#""sample":7,"turn":1,"attempt":1,"endpoint""#,
            ),
            "t",
        )
        .unwrap_err();
        assert!(e.to_string().contains("sample 7 has no `sample_start`"), "{e}");
        let e = Trace::parse(&example().replace(r#""sent":1.4,"answered":2.0"#, r#""sent":1.4,"answered":1.3"#), "t")
            .unwrap_err();
        assert!(e.to_string().contains("`answered` (1.3) is before `sent` (1.4)"), "{e}");
    }

    #[test]
    fn an_unfinished_run_ends_at_its_last_event() {
        let full = example();
        let text: Vec<&str> = full.lines().take(9).collect();
        let t = Trace::parse(&text.join("\n"), "t").unwrap();
        let s = summarize(&t);
        assert!(close(s.wall, 2.0));
        assert!(close(s.path.iter().map(|x| x.1).sum::<f64>(), 2.0), "{:?}", s.path);
    }
}
