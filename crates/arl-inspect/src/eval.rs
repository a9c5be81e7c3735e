//! `arl-inspect eval`: benchmark scores as papers report them, from scored
//! records (`arl-reward` output): per `data_source` and per slice (`--by
//! metadata.level`, …), the number of problems and samples, and
//!
//! * with one sample per problem, the accuracy with its Wilson 95% interval;
//! * with n > 1 samples, pass@k for each k asked (default 1 and n) by the
//!   unbiased estimator of Chen et al. (2021), `1 − C(n−c, k) / C(n, k)` per
//!   problem with c of n samples solved, averaged over problems, with a
//!   bootstrap 95% interval over problems (percentiles of `--bootstrap`
//!   resamples, seeded).
//!
//! A sample is solved when its score (`reward_detail.score`, the verdict
//! before shaping, else `reward`) is at least `--pass-threshold`. Also shown:
//! the mean response length in tokens and the share cut at the length limit
//! (`finish_reason: length`), so a score can be read against
//! `max_new_tokens`.
use arl_core::record::Record;
use arl_core::rng::{mix, Rng};
use arl_core::stats::Stats;
use serde_json::{json, Value};
use std::collections::BTreeMap;

/// 95% two-sided normal quantile.
const Z: f64 = 1.959_963_984_540_054;

/// Wilson score interval (95%) of `c` successes in `n` trials.
pub fn wilson(c: u64, n: u64) -> (f64, f64) {
    if n == 0 {
        return (0.0, 1.0);
    }
    let (n, p) = (n as f64, c as f64 / n as f64);
    let z2 = Z * Z;
    let centre = (p + z2 / (2.0 * n)) / (1.0 + z2 / n);
    let half = Z * (p * (1.0 - p) / n + z2 / (4.0 * n * n)).sqrt() / (1.0 + z2 / n);
    ((centre - half).max(0.0), (centre + half).min(1.0))
}

/// The unbiased pass@k of one problem with `c` of `n` samples solved:
/// `1 − C(n−c, k)/C(n, k)`, as a product (no large binomials). Needs k ≤ n.
pub fn pass_at_k(n: u64, c: u64, k: u64) -> f64 {
    assert!(k >= 1 && k <= n && c <= n, "pass@{k} of {c}/{n}");
    if n - c < k {
        return 1.0;
    }
    1.0 - ((n - c + 1)..=n).map(|i| 1.0 - k as f64 / i as f64).product::<f64>()
}

/// One problem: samples, solved, response tokens, samples cut at the limit.
#[derive(Debug, Default, Clone)]
struct Problem {
    n: u64,
    c: u64,
    tokens: u64,
    cut: u64,
}

/// The problems of one slice of one benchmark.
#[derive(Debug, Default)]
struct Slice {
    problems: BTreeMap<String, Problem>,
}

/// Accumulates records; [`Eval::to_json`] and [`Eval::to_table`] report.
pub struct Eval {
    by: Vec<String>,
    threshold: f64,
    /// (data_source, slice label) → the slice; slice `all` for each benchmark.
    slices: BTreeMap<(String, String), Slice>,
}

impl Eval {
    pub fn new(by: Vec<String>, threshold: f64) -> Eval {
        Eval { by, threshold, slices: BTreeMap::new() }
    }

    pub fn push(&mut self, r: &Record) {
        let bench = Stats::key_of(r, "data_source");
        let id = r.prompt_id.clone().unwrap_or_else(|| format!("(record {})", self.slices.len()));
        let score = r
            .reward_detail
            .as_ref()
            .and_then(|d| d.get("score"))
            .and_then(Value::as_f64)
            .or(r.reward.map(f64::from))
            .unwrap_or(0.0);
        let tokens = match (&r.tokens, r.prompt_len) {
            (Some(t), Some(p)) => t.len().saturating_sub(p as usize) as u64,
            _ => 0,
        };
        let cut = r.finish_reason.as_deref() == Some("length");
        let mut labels = vec!["all".to_string()];
        for f in &self.by {
            // A field the benchmark does not have makes no slice of it.
            let v = Stats::key_of(r, f);
            if v != "(none)" {
                labels.push(format!("{}={v}", f.strip_prefix("metadata.").unwrap_or(f)));
            }
        }
        for l in labels {
            let p = self.slices.entry((bench.clone(), l)).or_default().problems.entry(id.clone()).or_default();
            p.n += 1;
            p.c += u64::from(score >= self.threshold);
            p.tokens += tokens;
            p.cut += u64::from(cut);
        }
    }

    /// pass@k of each k in `ks` that every problem of the slice has samples
    /// for, with its bootstrap interval; accuracy with Wilson's when one
    /// sample each.
    fn summarise(&self, s: &Slice, ks: &[u64], resamples: u32, seed: u64) -> Value {
        let probs: Vec<&Problem> = s.problems.values().collect();
        let (samples, solved): (u64, u64) = probs.iter().fold((0, 0), |(a, b), p| (a + p.n, b + p.c));
        let min_n = probs.iter().map(|p| p.n).min().unwrap_or(0);
        let max_n = probs.iter().map(|p| p.n).max().unwrap_or(0);
        let tokens: u64 = probs.iter().map(|p| p.tokens).sum();
        let cut: u64 = probs.iter().map(|p| p.cut).sum();
        let mut out = json!({
            "problems": probs.len(),
            "samples": samples,
            "samples_per_problem": if min_n == max_n { json!(min_n) } else { json!([min_n, max_n]) },
            "solved_samples": solved,
            "mean_response_tokens": if samples > 0 { tokens as f64 / samples as f64 } else { 0.0 },
            "cut_at_length": if samples > 0 { cut as f64 / samples as f64 } else { 0.0 },
        });
        if max_n == 1 {
            let (lo, hi) = wilson(solved, samples);
            out["accuracy"] =
                json!({"value": solved as f64 / samples.max(1) as f64, "ci95": [lo, hi], "interval": "wilson"});
            return out;
        }
        let mut ks: Vec<u64> = if ks.is_empty() { vec![1, min_n] } else { ks.to_vec() };
        ks.retain(|&k| k >= 1 && k <= min_n);
        ks.dedup();
        let mut pass = serde_json::Map::new();
        for k in ks {
            let per: Vec<f64> = probs.iter().map(|p| pass_at_k(p.n, p.c, k)).collect();
            let mean = per.iter().sum::<f64>() / per.len() as f64;
            let (lo, hi) = bootstrap(&per, resamples, mix(&[seed, k]));
            pass.insert(format!("pass@{k}"), json!({"value": mean, "ci95": [lo, hi], "interval": "bootstrap"}));
        }
        out["pass"] = Value::Object(pass);
        out
    }

    /// Every benchmark and slice, in order (`all` first).
    pub fn to_json(&self, ks: &[u64], resamples: u32, seed: u64) -> Value {
        let mut benches = serde_json::Map::new();
        for ((bench, label), s) in self.ordered() {
            let e = benches.entry(bench.clone()).or_insert_with(|| json!({}));
            e[label] = self.summarise(s, ks, resamples, seed);
        }
        json!({"pass_threshold": self.threshold, "bootstrap_resamples": resamples, "seed": seed, "benchmarks": benches})
    }

    fn ordered(&self) -> Vec<(&(String, String), &Slice)> {
        let mut v: Vec<_> = self.slices.iter().collect();
        v.sort_by(|a, b| (&a.0 .0, a.0 .1 != "all", &a.0 .1).cmp(&(&b.0 .0, b.0 .1 != "all", &b.0 .1)));
        v
    }

    /// One line per benchmark and slice.
    pub fn to_table(&self, ks: &[u64], resamples: u32, seed: u64) -> String {
        let pct = |v: &Value| v.as_f64().map_or("-".into(), |x| format!("{:.1}", 100.0 * x));
        let mut out = format!(
            "{:<12} {:<32} {:>8} {:>7} {:>9} {:>15} {:>9} {:>6}\n",
            "benchmark", "slice", "problems", "n/prob", "score %", "95% interval", "tokens", "cut %"
        );
        for ((bench, label), s) in self.ordered() {
            let j = self.summarise(s, ks, resamples, seed);
            let per = match &j["samples_per_problem"] {
                Value::Array(a) => format!("{}-{}", a[0], a[1]),
                v => v.to_string(),
            };
            let mut scores: Vec<(String, &Value)> = Vec::new();
            if let Some(a) = j.get("accuracy") {
                scores.push(("accuracy".into(), a));
            }
            if let Some(Value::Object(p)) = j.get("pass") {
                scores.extend(p.iter().map(|(k, v)| (k.clone(), v)));
            }
            for (i, (name, v)) in scores.iter().enumerate() {
                let ci = format!("[{}, {}]", pct(&v["ci95"][0]), pct(&v["ci95"][1]));
                let (b, l) = if i == 0 { (bench.as_str(), label.as_str()) } else { ("", "") };
                let tail = if i == 0 {
                    format!(
                        "{:>9.0} {:>6}",
                        j["mean_response_tokens"].as_f64().unwrap_or(0.0),
                        pct(&j["cut_at_length"])
                    )
                } else {
                    String::new()
                };
                out.push_str(&format!(
                    "{b:<12} {l:<32} {:>8} {:>7} {:>9} {:>15} {tail}  {name}\n",
                    if i == 0 { j["problems"].to_string() } else { String::new() },
                    if i == 0 { per.clone() } else { String::new() },
                    pct(&v["value"]),
                    ci,
                ));
            }
        }
        out
    }
}

/// The 2.5th and 97.5th percentiles of the mean of `xs` over `resamples`
/// resamples with replacement.
fn bootstrap(xs: &[f64], resamples: u32, seed: u64) -> (f64, f64) {
    if xs.is_empty() || resamples == 0 {
        return (0.0, 1.0);
    }
    let mut rng = Rng::new(seed);
    let mut means: Vec<f64> = (0..resamples)
        .map(|_| (0..xs.len()).map(|_| xs[rng.below(xs.len() as u64) as usize]).sum::<f64>() / xs.len() as f64)
        .collect();
    means.sort_by(f64::total_cmp);
    let at = |q: f64| means[((q * (means.len() - 1) as f64).round() as usize).min(means.len() - 1)];
    (at(0.025), at(0.975))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn wilson_matches_hand_values() {
        // 8 of 10: the textbook interval is [0.490, 0.943].
        let (lo, hi) = wilson(8, 10);
        assert!((lo - 0.4902).abs() < 1e-3 && (hi - 0.9433).abs() < 1e-3, "{lo} {hi}");
        let (lo, hi) = wilson(0, 50);
        assert!(lo.abs() < 1e-12, "{lo}");
        assert!((hi - 0.0714).abs() < 1e-3, "{hi}");
    }

    #[test]
    fn pass_at_k_is_the_unbiased_estimator() {
        // n = 5, c = 2: pass@1 = 2/5; pass@2 = 1 − C(3,2)/C(5,2) = 1 − 3/10.
        assert!((pass_at_k(5, 2, 1) - 0.4).abs() < 1e-12);
        assert!((pass_at_k(5, 2, 2) - 0.7).abs() < 1e-12);
        assert_eq!(pass_at_k(5, 4, 2), 1.0);
        assert_eq!(pass_at_k(5, 0, 5), 0.0);
    }

    #[test]
    fn bootstrap_brackets_the_mean() {
        let xs: Vec<f64> = (0..200).map(|i| f64::from(u8::from(i % 4 == 0))).collect();
        let (lo, hi) = bootstrap(&xs, 2000, 7);
        assert!(lo < 0.25 && hi > 0.25 && hi - lo < 0.15, "{lo} {hi}");
        assert_eq!(bootstrap(&xs, 2000, 7), (lo, hi), "seeded");
    }
}
