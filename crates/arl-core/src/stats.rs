//! Streaming statistics over a record stream (`arl-inspect stats`): counts,
//! statuses, rewards overall and per `data_source`, response lengths, token
//! totals, group sizes, and pass@k / mean@k per `data_source` (and per any
//! further field named with `--by`, e.g. `metadata.kind`).
use crate::record::{Record, Status};
use serde_json::{json, Map, Value};
use std::collections::{BTreeMap, HashMap};

/// Running mean / variance / min / max (Welford).
#[derive(Debug, Clone, Default)]
pub struct Moments {
    pub n: u64,
    mean: f64,
    m2: f64,
    pub min: f64,
    pub max: f64,
}

impl Moments {
    pub fn push(&mut self, x: f64) {
        if self.n == 0 {
            self.min = x;
            self.max = x;
        } else {
            self.min = self.min.min(x);
            self.max = self.max.max(x);
        }
        self.n += 1;
        let d = x - self.mean;
        self.mean += d / self.n as f64;
        self.m2 += d * (x - self.mean);
    }
    pub fn mean(&self) -> f64 {
        self.mean
    }
    /// Population standard deviation.
    pub fn std(&self) -> f64 {
        if self.n == 0 {
            0.0
        } else {
            (self.m2 / self.n as f64).sqrt()
        }
    }
    pub fn to_json(&self) -> Value {
        if self.n == 0 {
            return json!({"count": 0});
        }
        json!({"count": self.n, "mean": self.mean, "std": self.std(), "min": self.min, "max": self.max})
    }
}

#[derive(Debug, Default)]
struct Group {
    size: u64,
    /// The group's value of each breakdown key (data_source first), from its first record.
    keys: Vec<String>,
    /// Per scored sample: `reward_detail.score` when present, else `reward`.
    scores: Vec<f64>,
}

#[derive(Debug, Default)]
struct Source {
    records: u64,
    reward: Moments,
    response_len: Moments,
    tool_calls: Moments,
}

/// Accumulates statistics record by record.
#[derive(Debug)]
pub struct Stats {
    records: u64,
    status: BTreeMap<String, u64>,
    reward: Moments,
    /// Breakdowns: `data_source`, then every `--by` field, each value → its stats.
    breakdowns: Vec<(String, BTreeMap<String, Source>)>,
    response_lens: Vec<u32>,
    tokens_total: u64,
    tokens_response: u64,
    tokens_trainable: u64,
    turns: Moments,
    tool_calls: Moments,
    groups: HashMap<String, Group>,
    group_order: Vec<String>,
    /// A sample counts as solved for pass@k when its score (`reward_detail.score`,
    /// else `reward`) is at least this.
    pub pass_threshold: f64,
}

impl Stats {
    pub fn new(pass_threshold: f64) -> Stats {
        Stats {
            records: 0,
            status: BTreeMap::new(),
            reward: Moments::default(),
            breakdowns: vec![("data_source".to_string(), BTreeMap::new())],
            response_lens: Vec::new(),
            tokens_total: 0,
            tokens_response: 0,
            tokens_trainable: 0,
            turns: Moments::default(),
            tool_calls: Moments::default(),
            groups: HashMap::new(),
            group_order: Vec::new(),
            pass_threshold,
        }
    }

    /// The fields [`Stats::push`] reads (a breakdown's field comes on top).
    pub const READS: &'static [&'static str] = &[
        "data_source",
        "status",
        "reward",
        "reward_detail",
        "tokens",
        "prompt_len",
        "loss_mask",
        "turns",
        "tool_calls",
        "prompt_id",
    ];

    /// Adds a breakdown by `field`: a top-level record field (`status`,
    /// `finish_reason`, …) or a path into `metadata` (`metadata.kind`).
    pub fn by(mut self, field: &str) -> Stats {
        self.breakdowns.push((field.to_string(), BTreeMap::new()));
        self
    }

    /// The value of `field` (`data_source`, `status`, `metadata.PATH`, or a
    /// record field) of `r` as a breakdown label; `(none)` when absent.
    pub fn key_of(r: &Record, field: &str) -> String {
        let label = |v: Option<&Value>| match v {
            None | Some(Value::Null) => "(none)".to_string(),
            Some(Value::String(s)) => s.clone(),
            Some(v) => v.to_string(),
        };
        match field {
            "data_source" => r.data_source.clone().unwrap_or_else(|| "(none)".to_string()),
            "status" => r.status.map_or_else(|| "(none)".to_string(), |s| s.as_str().to_string()),
            _ => match field.strip_prefix("metadata.") {
                Some(path) => {
                    let mut v = r.metadata.as_ref().and_then(|m| m.get(path.split('.').next().unwrap_or("")));
                    for p in path.split('.').skip(1) {
                        v = v.and_then(|x| x.get(p));
                    }
                    label(v)
                }
                None => label(serde_json::to_value(r).ok().as_ref().and_then(|j| j.get(field))),
            },
        }
    }

    pub fn push(&mut self, r: &Record) {
        self.records += 1;
        if let Some(s) = r.status {
            *self.status.entry(s.as_str().to_string()).or_default() += 1;
        }
        let keys: Vec<String> = self.breakdowns.iter().map(|(f, _)| Self::key_of(r, f)).collect();
        for ((_, map), key) in self.breakdowns.iter_mut().zip(&keys) {
            let src = map.entry(key.clone()).or_default();
            src.records += 1;
            if let Some(x) = r.reward {
                src.reward.push(x as f64);
            }
            if let Some(n) = r.response_len() {
                src.response_len.push(n as f64);
            }
            if let Some(t) = r.tool_calls {
                src.tool_calls.push(t as f64);
            }
        }
        if let Some(x) = r.reward {
            self.reward.push(x as f64);
        }
        if let Some(t) = &r.tokens {
            self.tokens_total += t.len() as u64;
        }
        if let Some(n) = r.response_len() {
            self.response_lens.push(n as u32);
            self.tokens_response += n as u64;
        }
        self.tokens_trainable += r.trainable_tokens() as u64;
        if let Some(t) = r.turns {
            self.turns.push(t as f64);
        }
        if let Some(t) = r.tool_calls {
            self.tool_calls.push(t as f64);
        }
        if let Some(pid) = &r.prompt_id {
            let g = self.groups.entry(pid.clone()).or_insert_with(|| {
                self.group_order.push(pid.clone());
                Group { keys, ..Default::default() }
            });
            g.size += 1;
            if let Some(x) = r.reward {
                // The verifier's verdict before shaping (format bonus, tool
                // cost, overlong penalty) when `arl-reward` recorded it.
                let score = r.reward_detail.as_ref().and_then(|d| d.get("score")).and_then(Value::as_f64);
                g.scores.push(score.unwrap_or(x as f64));
            }
        }
    }

    fn percentile(sorted: &[u32], p: f64) -> u32 {
        if sorted.is_empty() {
            return 0;
        }
        // Nearest-rank percentile.
        let rank = ((p / 100.0) * sorted.len() as f64).ceil().max(1.0) as usize;
        sorted[rank.min(sorted.len()) - 1]
    }

    pub fn to_json(&self) -> Value {
        let mut lens = self.response_lens.clone();
        lens.sort_unstable();
        let mut status = Map::new();
        for s in Status::ALL {
            status.insert(s.as_str().to_string(), json!(self.status.get(s.as_str()).copied().unwrap_or(0)));
        }
        let mut sizes: BTreeMap<u64, u64> = BTreeMap::new();
        for g in self.groups.values() {
            *sizes.entry(g.size).or_default() += 1;
        }
        let sections: Vec<Map<String, Value>> = (0..self.breakdowns.len()).map(|i| self.breakdown_json(i)).collect();
        let mut out = json!({
            "records": self.records,
            "status": status,
            "reward": self.reward.to_json(),
            "by_data_source": sections[0],
            "response_len": if lens.is_empty() { json!({"count": 0}) } else { json!({
                "count": lens.len(),
                "mean": lens.iter().map(|&x| x as f64).sum::<f64>() / lens.len() as f64,
                "min": lens[0],
                "p50": Self::percentile(&lens, 50.0),
                "p90": Self::percentile(&lens, 90.0),
                "p99": Self::percentile(&lens, 99.0),
                "max": lens[lens.len() - 1],
            })},
            "tokens": {"total": self.tokens_total, "response": self.tokens_response, "trainable": self.tokens_trainable},
            "groups": {"count": self.groups.len(), "sizes": sizes.iter().map(|(k, v)| (k.to_string(), json!(v))).collect::<Map<_, _>>()},
            "pass_threshold": self.pass_threshold,
        });
        if self.turns.n > 0 {
            out["turns"] = self.turns.to_json();
        }
        if self.tool_calls.n > 0 {
            out["tool_calls"] = self.tool_calls.to_json();
        }
        for (i, (field, _)) in self.breakdowns.iter().enumerate().skip(1) {
            out[format!("by_{field}")] = Value::Object(sections[i].clone());
        }
        out
    }

    /// One breakdown: per value, records, reward, groups, pass@k / mean@k,
    /// mean response length and tool calls.
    fn breakdown_json(&self, i: usize) -> Map<String, Value> {
        let mut by = Map::new();
        for (name, s) in &self.breakdowns[i].1 {
            let groups: Vec<&Group> = self.groups.values().filter(|g| &g.keys[i] == name).collect();
            let scored: Vec<&&Group> = groups.iter().filter(|g| !g.scores.is_empty()).collect();
            let mut o = json!({
                "records": s.records,
                "reward": s.reward.to_json(),
                "groups": groups.len(),
            });
            if !scored.is_empty() {
                let k = scored.iter().map(|g| g.scores.len()).max().unwrap_or(0);
                let pass = scored.iter().filter(|g| g.scores.iter().any(|&x| x >= self.pass_threshold)).count() as f64
                    / scored.len() as f64;
                let mean_k = scored.iter().map(|g| g.scores.iter().sum::<f64>() / g.scores.len() as f64).sum::<f64>()
                    / scored.len() as f64;
                o["k"] = json!(k);
                o["pass_at_k"] = json!(pass);
                o["mean_at_k"] = json!(mean_k);
            }
            if s.response_len.n > 0 {
                o["response_len_mean"] = json!(s.response_len.mean());
            }
            if s.tool_calls.n > 0 {
                o["tool_calls_mean"] = json!(s.tool_calls.mean());
            }
            by.insert(name.clone(), o);
        }
        by
    }

    /// A human-readable table of [`Stats::to_json`].
    pub fn to_table(&self) -> String {
        let j = self.to_json();
        let mut s = String::new();
        let f = |v: &Value| match v.as_f64() {
            Some(x) if v.is_f64() => format!("{x:.4}"),
            _ => v.to_string(),
        };
        s += &format!("records            {}\n", j["records"]);
        let st = &j["status"];
        s += &format!(
            "status             completed {}  truncated {}  aborted {}  failed {}\n",
            st["completed"], st["truncated"], st["aborted"], st["failed"]
        );
        let r = &j["reward"];
        if r["count"].as_u64().unwrap_or(0) > 0 {
            s += &format!(
                "reward             mean {}  std {}  min {}  max {}  (n={})\n",
                f(&r["mean"]),
                f(&r["std"]),
                f(&r["min"]),
                f(&r["max"]),
                r["count"]
            );
        } else {
            s += "reward             (none)\n";
        }
        let l = &j["response_len"];
        if l["count"].as_u64().unwrap_or(0) > 0 {
            s += &format!(
                "response tokens    mean {}  min {}  p50 {}  p90 {}  p99 {}  max {}\n",
                f(&l["mean"]),
                l["min"],
                l["p50"],
                l["p90"],
                l["p99"],
                l["max"]
            );
        }
        let t = &j["tokens"];
        s += &format!(
            "tokens             total {}  response {}  trainable {}\n",
            t["total"], t["response"], t["trainable"]
        );
        if let Some(tc) = j.get("tool_calls") {
            s += &format!("tool calls         mean {}  max {}\n", f(&tc["mean"]), f(&tc["max"]));
        }
        let g = &j["groups"];
        let sizes: Vec<String> =
            g["sizes"].as_object().map(|m| m.iter().map(|(k, v)| format!("{v}×{k}")).collect()).unwrap_or_default();
        s += &format!(
            "groups             {}  sizes {}\n",
            g["count"],
            if sizes.is_empty() { "-".into() } else { sizes.join(" ") }
        );
        for (field, _) in &self.breakdowns {
            let name = if field == "data_source" { "by_data_source".to_string() } else { format!("by_{field}") };
            s += &format!("\nby {field}\n");
            s += &format!(
                "  {:<28} {:>8} {:>7} {:>9} {:>9} {:>9} {:>9} {:>10}\n",
                field, "records", "groups", "reward", "std", "mean@k", "pass@k", "tool calls"
            );
            if let Some(m) = j[&name].as_object() {
                for (value, o) in m {
                    let opt = |v: &Value| {
                        if v.is_null() {
                            "-".to_string()
                        } else {
                            format!("{:.4}", v.as_f64().unwrap_or(0.0))
                        }
                    };
                    let k = o.get("k").and_then(Value::as_u64).map(|k| format!(" (k={k})")).unwrap_or_default();
                    s += &format!(
                        "  {:<28} {:>8} {:>7} {:>9} {:>9} {:>9} {:>9} {:>10}{k}\n",
                        value,
                        o["records"].to_string(),
                        o["groups"].to_string(),
                        opt(&o["reward"]["mean"]),
                        opt(&o["reward"]["std"]),
                        opt(o.get("mean_at_k").unwrap_or(&Value::Null)),
                        opt(o.get("pass_at_k").unwrap_or(&Value::Null)),
                        opt(o.get("tool_calls_mean").unwrap_or(&Value::Null)),
                    );
                }
            }
        }
        s
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn moments_match_hand_values() {
        let mut m = Moments::default();
        for x in [1.0, 2.0, 3.0, 4.0] {
            m.push(x);
        }
        assert_eq!(m.mean(), 2.5);
        assert!((m.std() - 1.118_033_988_749_895).abs() < 1e-12);
        assert_eq!((m.min, m.max), (1.0, 4.0));
    }

    #[test]
    fn pass_and_mean_at_k() {
        let mut s = Stats::new(1.0);
        for (pid, rw) in [("a", 1.0), ("a", 0.0), ("b", 0.0), ("b", 0.0)] {
            s.push(&Record {
                prompt_id: Some(pid.into()),
                data_source: Some("d".into()),
                reward: Some(rw),
                ..Default::default()
            });
        }
        let j = s.to_json();
        assert_eq!(j["by_data_source"]["d"]["pass_at_k"], json!(0.5));
        assert_eq!(j["by_data_source"]["d"]["mean_at_k"], json!(0.25));
        assert_eq!(j["groups"]["sizes"]["2"], json!(2));
    }

    #[test]
    fn pass_at_k_counts_the_verdict_not_the_shaped_reward() {
        // A tool-using success shaped below the threshold (1 - 0.1 tool cost)
        // still solves its group; a format bonus does not make a failure pass.
        let mut s = Stats::new(1.0);
        for (pid, rw, score) in [("a", 0.9, Some(1.0)), ("a", 0.0, Some(0.0)), ("b", 1.1, Some(0.0)), ("c", 1.0, None)]
        {
            s.push(&Record {
                prompt_id: Some(pid.into()),
                data_source: Some("d".into()),
                reward: Some(rw),
                reward_detail: score.map(|x: f64| json!({"rm": "math", "score": x})),
                ..Default::default()
            });
        }
        let d = &s.to_json()["by_data_source"]["d"];
        assert_eq!(d["pass_at_k"], json!(2.0 / 3.0));
        assert_eq!(d["mean_at_k"], json!((0.5 + 0.0 + 1.0) / 3.0));
        // The reward summary is still of the shaped reward.
        assert!((d["reward"]["mean"].as_f64().unwrap() - 3.0 / 4.0).abs() < 1e-6);
    }

    #[test]
    fn breakdown_by_a_metadata_field() {
        let mut s = Stats::new(1.0).by("metadata.kind");
        for (pid, kind, rw, tc) in
            [("a", "easy", 1.0, 0), ("a", "easy", 1.0, 1), ("b", "hard", 0.0, 1), ("c", "hard", 1.0, 1)]
        {
            let mut m = serde_json::Map::new();
            m.insert("kind".into(), json!(kind));
            s.push(&Record {
                prompt_id: Some(pid.into()),
                data_source: Some("arith".into()),
                reward: Some(rw),
                tool_calls: Some(tc),
                metadata: Some(m),
                ..Default::default()
            });
        }
        s.push(&Record { prompt_id: Some("d".into()), ..Default::default() });
        let j = s.to_json();
        let by = &j["by_metadata.kind"];
        assert_eq!(by["easy"]["tool_calls_mean"], json!(0.5));
        assert_eq!(by["hard"]["tool_calls_mean"], json!(1.0));
        assert_eq!(by["hard"]["pass_at_k"], json!(0.5));
        assert_eq!(by["(none)"]["records"], json!(1));
        assert_eq!(j["by_data_source"]["arith"]["records"], json!(4));
        assert!(s.to_table().contains("by metadata.kind"));
    }
}
