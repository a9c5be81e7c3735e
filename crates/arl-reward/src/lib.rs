//! Reward functions as a library: `arl-reward` and `arl-rollout --rm` both
//! call [`score`]. Each function returns a [`Score`]: the reward, a JSON
//! `reward_detail` that lets the reward be debugged from the file alone, and
//! a one-line human explanation (`--explain`).
//!
//! Batch-shaped rewards (`cmd`, which talks to an external program) live in
//! [`external`]; the binary drives them.
pub mod api;
pub mod arena;
pub mod bfcl;
pub mod code;
pub mod external;
mod goal;
pub use arl_math as math;
pub mod remote;
mod score;
pub mod sql;
pub mod text;
pub mod web;

use arl_core::record::Record;
use arl_env::sandbox::Sandbox;
use score::{err, need_label, need_response};
pub use score::{BaseScore, Score, ScoreError};
use serde_json::{json, Value};
use std::collections::BTreeMap;

/// The per-record reward functions.
#[derive(Debug, Clone)]
pub enum Rm {
    Math(math::MathOpts),
    Exact,
    F1,
    /// 1·weight when the response matches, else 0.
    Regex {
        pattern: regex::Regex,
        weight: f32,
    },
    Code(code::CodeOpts),
    Remote(remote::RemoteRm),
    Sql(sql::SqlOpts),
    Api(api::ApiOpts),
    /// The result of an arena game (`metadata.arena.result`).
    Game(arena::GameOpts),
    Web(std::sync::Arc<web::WebOpts>),
    /// BFCL's AST rules on the response's tool calls.
    Bfcl(bfcl::BfclOpts),
    /// Dispatch by `data_source` (exact name, else the default).
    Auto {
        map: BTreeMap<String, Box<Rm>>,
        default: Option<Box<Rm>>,
    },
}

impl Rm {
    pub fn name(&self) -> &'static str {
        match self {
            Rm::Math(_) => "math",
            Rm::Exact => "exact",
            Rm::F1 => "f1",
            Rm::Regex { .. } => "regex",
            Rm::Code(_) => "code",
            Rm::Remote(_) => "remote",
            Rm::Sql(_) => "sql",
            Rm::Api(_) => "api",
            Rm::Game(_) => "game",
            Rm::Web(_) => "web",
            Rm::Bfcl(_) => "bfcl",
            Rm::Auto { .. } => "auto",
        }
    }

    /// Whether scoring waits on something (a sandbox, a server), so records
    /// are worth scoring concurrently.
    pub fn waits(&self) -> bool {
        match self {
            Rm::Code(_) | Rm::Remote(_) | Rm::Sql(_) | Rm::Api(_) | Rm::Web(_) => true,
            Rm::Auto { map, default } => map.values().any(|r| r.waits()) || default.as_ref().is_some_and(|r| r.waits()),
            _ => false,
        }
    }
}

/// DAPO soft overlong punishment (Yu et al. 2025, "DAPO", eq. 13): no penalty
/// up to `max_len - buffer` tokens, then linear down to `-factor` at
/// `max_len`, and `-factor` beyond.
#[derive(Debug, Clone, Copy)]
pub struct Overlong {
    pub max_len: u32,
    pub buffer: u32,
    pub factor: f32,
}

impl Overlong {
    pub fn penalty(&self, len: u32) -> f32 {
        let start = self.max_len.saturating_sub(self.buffer);
        if len <= start {
            0.0
        } else if len <= self.max_len && self.buffer > 0 {
            -((len - start) as f32 / self.buffer as f32) * self.factor
        } else {
            -self.factor
        }
    }
}

/// A format bonus: `bonus` added when the response matches `pattern`.
#[derive(Debug, Clone)]
pub struct FormatBonus {
    pub pattern: regex::Regex,
    pub bonus: f32,
}

/// A reward function with its shaping.
#[derive(Debug, Clone)]
pub struct Spec {
    pub rm: Rm,
    pub sandbox: Option<Sandbox>,
    pub overlong: Option<Overlong>,
    pub format: Option<FormatBonus>,
}

impl Rm {
    /// The fields this reward reads, for the rewards that read a fixed set
    /// (the rule rewards and the code tests); `None` for those that may read
    /// any field (remote, sql, api, game, web).
    pub fn reads(&self) -> Option<Vec<&'static str>> {
        Some(match self {
            Rm::Math(_) => vec!["response", "label", "prompt"],
            Rm::Exact | Rm::F1 | Rm::Code(_) | Rm::Bfcl(_) => vec!["response", "label"],
            Rm::Regex { .. } => vec!["response"],
            Rm::Auto { map, default } => {
                let mut f = vec!["data_source"];
                for rm in map.values().chain(default.iter()) {
                    f.extend(rm.reads()?);
                }
                f
            }
            Rm::Remote(_) | Rm::Sql(_) | Rm::Api(_) | Rm::Game(_) | Rm::Web(_) => return None,
        })
    }
}

impl Spec {
    pub fn new(rm: Rm) -> Spec {
        Spec { rm, sandbox: None, overlong: None, format: None }
    }
}

/// The base reward of one record (no shaping).
pub fn base_score(rm: &Rm, sandbox: Option<&Sandbox>, r: &Record) -> Result<Score, ScoreError> {
    match rm {
        Rm::Math(o) => {
            let resp = need_response(r)?;
            let label = need_label(r)?;
            // Several acceptable answers (`["1/2", "0.5"]`): correct if any matches.
            let labels: Vec<String> = match label {
                Value::Array(a) if a.len() > 1 => a.iter().map(math::label_text).collect::<Option<Vec<_>>>(),
                l => math::label_text(l).map(|x| vec![x]),
            }
            .ok_or_else(|| err("field `label`: expected a string or number answer (or a list of them)"))?;
            let mut best = None;
            for l in &labels {
                let v = math::grade(resp, l, o);
                let done = v.correct;
                if best.as_ref().is_none_or(|b: &math::MathVerdict| v.credit >= b.credit) {
                    best = Some(v);
                }
                if done {
                    break;
                }
            }
            let mut v = best.ok_or_else(|| err("field `label`: empty list"))?;
            // Repeating the question's computation ("The answer is 9 + 8.") is not an answer.
            if let (Some(n), Some(p)) = (&v.normalized, &r.prompt) {
                if v.credit > 0.0 && math::restates_prompt(n, p) {
                    (v.correct, v.credit, v.how) = (false, 0.0, "restated");
                }
            }
            Ok(Score { reward: v.credit as f32, detail: v.to_json(), explain: v.explain() })
        }
        Rm::Exact => text::exact(need_response(r)?, need_label(r)?),
        Rm::F1 => text::f1(need_response(r)?, need_label(r)?),
        Rm::Regex { pattern, weight } => Ok(text::regex_reward(need_response(r)?, pattern, *weight)),
        Rm::Code(o) => {
            let sb = sandbox.ok_or_else(|| err("the code reward needs a sandbox"))?;
            code::score(o, sb, need_response(r)?, need_label(r)?)
        }
        Rm::Remote(rr) => rr.score(r),
        Rm::Sql(o) => sql::score(o, r),
        Rm::Api(o) => api::score(o, r),
        Rm::Game(o) => arena::game_score(o, r),
        Rm::Web(o) => web::score(o, r),
        Rm::Bfcl(o) => bfcl::score(o, r),
        Rm::Auto { map, default } => {
            let ds = r.data_source.as_deref().unwrap_or("");
            let chosen = map.get(ds).or(default.as_ref()).ok_or_else(|| {
                err(format!(
                    "field `data_source`: `{ds}` has no reward function (add `--map {ds}=NAME` or `--default-rm NAME`)"
                ))
            })?;
            let mut s = base_score(chosen, sandbox, r)?;
            if let Value::Object(m) = &mut s.detail {
                m.insert("data_source".into(), json!(ds));
            }
            s.explain = format!("[{} via data_source `{ds}`] {}", chosen.name(), s.explain);
            Ok(s)
        }
    }
}

fn leaf_name<'a>(rm: &'a Rm, r: &Record) -> &'a str {
    match rm {
        Rm::Auto { map, default } => {
            let ds = r.data_source.as_deref().unwrap_or("");
            map.get(ds).or(default.as_ref()).map_or("auto", |x| x.name())
        }
        x => x.name(),
    }
}

/// The fields scoring with `spec` reads (reward and shaping; `prompt_id` and
/// `sample_index` name records in messages), or `None` when the reward may
/// read any field.
pub fn reads(spec: &Spec) -> Option<Vec<&'static str>> {
    let mut f = spec.rm.reads()?;
    f.extend(["prompt_id", "sample_index", "metadata", "tool_calls"]);
    if spec.format.is_some() {
        f.push("response");
    }
    if spec.overlong.is_some() {
        f.extend(["tokens", "prompt_len"]);
    }
    f.sort_unstable();
    f.dedup();
    Some(f)
}

/// Scores one record: the base reward plus shaping. `reward_detail` always
/// carries `rm`, `score` (the base reward) and the shaping terms applied.
pub fn score(spec: &Spec, r: &Record) -> Result<Score, ScoreError> {
    let base = base_score(&spec.rm, spec.sandbox.as_ref(), r)?;
    Ok(shape(spec, r, base, leaf_name(&spec.rm, r)))
}

/// Adds the shaping terms to a base score (also used for `cmd` rewards):
/// format bonus, tool-call cost (`metadata.tool_cost` × `tool_calls`), DAPO overlong.
pub fn shape(spec: &Spec, r: &Record, base: Score, rm_name: &str) -> Score {
    let mut detail = json!({ "rm": rm_name, "score": base.reward });
    if let (Value::Object(d), Value::Object(b)) = (&mut detail, &base.detail) {
        for (k, v) in b {
            d.insert(k.clone(), v.clone());
        }
    } else if !base.detail.is_null() {
        detail["detail"] = base.detail.clone();
    }
    let mut reward = base.reward;
    let mut explain = base.explain;
    if let Some(f) = &spec.format {
        let ok = r.response.as_deref().is_some_and(|s| f.pattern.is_match(s));
        let b = if ok { f.bonus } else { 0.0 };
        reward += b;
        detail["format_bonus"] = json!(b);
        explain.push_str(&format!("; format {} (+{b})", if ok { "matched" } else { "not matched" }));
    }
    // `metadata.tool_cost` (set by `arl-tasks arith --tool-cost`): each tool call costs.
    if let Some(c) = r.meta("tool_cost").and_then(Value::as_f64) {
        let calls = r.tool_calls.unwrap_or(0);
        let p = -(c as f32) * calls as f32;
        reward += p;
        detail["tool_cost_penalty"] = json!(p);
        if calls > 0 {
            explain.push_str(&format!("; {calls} tool calls × {c} ({p:+.3})"));
        }
    }
    if let Some(o) = &spec.overlong {
        match r.response_len() {
            Some(len) => {
                let p = o.penalty(len as u32);
                reward += p;
                detail["overlong_penalty"] = json!(p);
                detail["response_len"] = json!(len);
                if p != 0.0 {
                    explain.push_str(&format!("; overlong {len} tokens ({p:+.3})"));
                }
            }
            None => {
                detail["overlong_penalty"] = Value::Null;
                explain.push_str("; no tokens/prompt_len, overlong penalty not applied");
            }
        }
    }
    Score { reward, detail, explain }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn dapo_overlong_is_linear_in_the_buffer() {
        let o = Overlong { max_len: 100, buffer: 20, factor: 1.0 };
        assert_eq!(o.penalty(80), 0.0);
        assert!((o.penalty(90) + 0.5).abs() < 1e-6);
        assert_eq!(o.penalty(100), -1.0);
        assert_eq!(o.penalty(150), -1.0);
        let mut prev = 0.0;
        for l in 0..=100 {
            let p = o.penalty(l);
            assert!(p <= prev + 1e-7 && p >= -1.0);
            prev = p;
        }
    }
}
