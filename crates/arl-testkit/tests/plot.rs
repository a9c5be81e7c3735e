//! scripts/plot.py (standard-library Python): each panel's y range follows
//! its data, the training signals of the `rl` lines get their own panels,
//! and the title is the one given (the experiment's).
use arl_testkit::common::*;
use serde_json::json;

fn labels(svg: &str) -> Vec<String> {
    svg.split("<text ")
        .filter_map(|t| t.split('>').nth(1))
        .map(|t| t.split('<').next().unwrap_or("").to_string())
        .collect()
}

#[test]
fn plot_ranges_follow_the_data_and_signals_get_panels() {
    let d = tmpdir();
    let mut lines = Vec::new();
    for step in 0..=6 {
        if step > 0 {
            lines.push(
                json!({"phase": "rl", "step": step, "reward_mean": -0.9 + 0.1 * step as f64, "tool_call_rate": 0.5,
                "loss": 12.0 + step as f64, "grad_norm": 3.5, "entropy": 1.2, "clip_frac": 0.01 * step as f64,
                "response_len": 40.0 + step as f64, "kl_loss": null}),
            );
        }
        if step % 3 == 0 {
            lines.push(json!({"phase": "eval", "step": step, "greedy_accuracy": step as f64 / 6.0, "mean_at_k": 0.1, "pass_at_k": 0.5}));
        }
    }
    std::fs::write(d.path().join("metrics.jsonl"), to_jsonl(&lines)).unwrap();
    let script = root().join("scripts/plot.py");
    let st = std::process::Command::new("python3")
        .arg(&script)
        .args(["metrics.jsonl", "-o", "out.svg", "--title", "arl demo-x: a title from the experiment"])
        .current_dir(d.path())
        .status()
        .unwrap();
    assert!(st.success());
    let svg = std::fs::read_to_string(d.path().join("out.svg")).unwrap();
    let l = labels(&svg);
    assert!(l.contains(&"arl demo-x: a title from the experiment".to_string()), "{l:?}");
    // The reward reaches below 0: its panel shows negative ticks.
    assert!(l.contains(&"-1.0".to_string()) && l.contains(&"-0.5".to_string()), "{l:?}");
    // One panel per signal present (kl_loss is null throughout: no panel).
    for t in ["loss", "grad norm", "entropy", "clip fraction", "response length"] {
        assert!(l.contains(&t.to_string()), "no `{t}` panel: {l:?}");
    }
    assert!(!l.contains(&"KL loss".to_string()));
    // The loss panel's range is the loss's (13..18), not [0, 1].
    assert!(l.iter().any(|x| x == "18" || x == "18.0"), "{l:?}");
    // Without --title: the run directory's name.
    let st = std::process::Command::new("python3")
        .arg(&script)
        .args(["metrics.jsonl", "-o", "plain.svg"])
        .current_dir(d.path())
        .status()
        .unwrap();
    assert!(st.success());
    let dir = d.path().file_name().unwrap().to_string_lossy().to_string();
    assert!(std::fs::read_to_string(d.path().join("plain.svg")).unwrap().contains(&format!("arl run {dir}")));
}
