//! Arena rewards.
//!
//! * `game`: the reward of a played game from its result in
//!   `metadata.arena` (written by `arl-rollout --arena`): win, draw, loss, or
//!   a forfeit of this seat, each with its configurable value. The defaults
//!   (1, 0, −1, forfeit = loss) make the two seats' rewards sum to zero.
//! * `arena`: tournament-ranked rewards for open-ended answers (ArenaRL-style):
//!   the samples of one prompt (a group, by `prompt_id`) meet in a round robin
//!   or an elimination bracket ([`arl_env::arena::tournament`]) and a judge
//!   decides each match: a rule (`longer`, `shorter`), a reward function's
//!   score (`score`: the higher base reward wins), an external program (`cmd`)
//!   or a model behind an OpenAI-style endpoint (`model`).
use crate::score::{BaseScore, Score, ScoreError};
use anyhow::{anyhow, bail, Context, Result};
use arl_core::record::Record;
use arl_env::arena::tournament::{self, Format, Verdict, Winner};
use serde_json::{json, Value};
use std::io::{BufRead, BufReader, Write};
use std::process::{Child, ChildStdin, ChildStdout, Command, Stdio};
use std::time::Duration;

/// The values of game results.
#[derive(Debug, Clone, Copy)]
pub struct GameOpts {
    pub win: f32,
    pub draw: f32,
    pub loss: f32,
    /// A loss by this seat's forfeit (illegal moves, out of tokens).
    pub forfeit: f32,
}

impl Default for GameOpts {
    fn default() -> GameOpts {
        GameOpts { win: 1.0, draw: 0.0, loss: -1.0, forfeit: -1.0 }
    }
}

/// The reward of one seat's game record.
pub fn game_score(o: &GameOpts, r: &Record) -> Result<Score, ScoreError> {
    let a = r.meta("arena").ok_or_else(|| {
        ScoreError("field `metadata.arena`: missing; `--rm game` scores records of `arl-rollout --arena`".into())
    })?;
    let result = a
        .get("result")
        .and_then(Value::as_str)
        .ok_or_else(|| ScoreError("field `metadata.arena.result`: expected `win`, `draw` or `loss`".into()))?;
    let seat = a.get("seat").and_then(Value::as_str).unwrap_or("?");
    let forfeited = a.get("forfeit").and_then(|f| f.get("seat")).and_then(Value::as_str) == Some(seat);
    let (reward, what) = match result {
        "win" => (o.win, "win".to_string()),
        "draw" => (o.draw, "draw".to_string()),
        "loss" if forfeited => (o.forfeit, "loss by forfeit".to_string()),
        "loss" => (o.loss, "loss".to_string()),
        other => {
            return Err(ScoreError(format!(
                "field `metadata.arena.result`: `{other}` is not a finished game (`win`, `draw`, `loss`)"
            )))
        }
    };
    let reason = a.get("reason").and_then(Value::as_str).unwrap_or("");
    let game = a.get("game").and_then(Value::as_str).unwrap_or("game");
    Ok(Score {
        reward,
        detail: json!({"game": game, "seat": seat, "result": result, "reason": reason, "forfeited": forfeited,
                       "values": {"win": o.win, "draw": o.draw, "loss": o.loss, "forfeit": o.forfeit}}),
        explain: format!("{game}: seat {seat}: {what} ({reason})"),
    })
}

/// Who decides a match.
pub enum Judge {
    /// The longer response (in characters) wins; equal lengths tie.
    Longer,
    Shorter,
    /// The higher base score of a reward function wins (against the label).
    Score(BaseScore),
    Cmd(CmdJudge),
    Model(ModelJudge),
}

impl Judge {
    pub fn name(&self) -> &'static str {
        match self {
            Judge::Longer => "longer",
            Judge::Shorter => "shorter",
            Judge::Score(_) => "score",
            Judge::Cmd(_) => "cmd",
            Judge::Model(_) => "model",
        }
    }

    /// One match: `a` is shown first.
    fn compare(&mut self, a: &Record, b: &Record) -> Result<Verdict, String> {
        let ra = a.response.as_deref().unwrap_or("");
        let rb = b.response.as_deref().unwrap_or("");
        match self {
            Judge::Longer | Judge::Shorter => {
                let (la, lb) = (ra.chars().count(), rb.chars().count());
                let ord = if matches!(self, Judge::Longer) { la.cmp(&lb) } else { lb.cmp(&la) };
                Ok(Verdict { winner: from_ord(ord), note: json!({"len_a": la, "len_b": lb}) })
            }
            Judge::Score(score) => {
                let sa = score(a).map_err(|e| e.0)?.reward;
                let sb = score(b).map_err(|e| e.0)?.reward;
                Ok(Verdict {
                    winner: from_ord(sa.partial_cmp(&sb).unwrap_or(std::cmp::Ordering::Equal)),
                    note: json!({"score_a": sa, "score_b": sb}),
                })
            }
            Judge::Cmd(c) => c.compare(a, b),
            Judge::Model(m) => m.compare(a, b),
        }
    }
}

fn from_ord(o: std::cmp::Ordering) -> Winner {
    match o {
        std::cmp::Ordering::Greater => Winner::A,
        std::cmp::Ordering::Less => Winner::B,
        std::cmp::Ordering::Equal => Winner::Tie,
    }
}

/// Reads a verdict answer: `"a"`, `"b"`, `"tie"` (any case), an object with
/// `winner`, or a number in [0, 1], the probability that A is better
/// (above ½: A, below: B, ½: tie).
pub fn parse_verdict(v: &Value) -> Result<Winner, String> {
    let w = match v {
        Value::String(s) => s.clone(),
        Value::Object(o) => match o.get("winner") {
            Some(w) => return parse_verdict(w),
            None => return Err("the answer object has no `winner`".into()),
        },
        Value::Number(n) => {
            let p = n.as_f64().unwrap_or(f64::NAN);
            if !(0.0..=1.0).contains(&p) {
                return Err(format!("a numeric verdict is the probability that A wins, in [0, 1]; got {p}"));
            }
            return Ok(from_ord(p.partial_cmp(&0.5).unwrap_or(std::cmp::Ordering::Equal)));
        }
        other => return Err(format!("expected \"a\", \"b\", \"tie\", {{\"winner\": …}} or a number, got {other}")),
    };
    match w.trim().to_ascii_lowercase().as_str() {
        "a" => Ok(Winner::A),
        "b" => Ok(Winner::B),
        "tie" | "draw" => Ok(Winner::Tie),
        other => Err(format!("unknown verdict `{other}` (expected a, b or tie)")),
    }
}

/// The question a judge sees for a record: its prompt's last user message, or the prompt text.
fn question(r: &Record) -> String {
    let p = r.prompt.as_deref().unwrap_or("");
    match arl_core::dataset::prompt_messages(p) {
        Some(msgs) => msgs
            .iter()
            .rev()
            .find(|m| m.get("role").and_then(Value::as_str) == Some("user"))
            .and_then(|m| m.get("content").and_then(Value::as_str))
            .unwrap_or(p)
            .to_string(),
        None => p.to_string(),
    }
}

/// An external judge: `sh -c COMMAND`, started once and kept running; for
/// each match it gets one JSON line `{"prompt_id", "prompt", "label", "a",
/// "b", "a_index", "b_index"}` (`a`, `b` the responses) on stdin and answers
/// one line on stdout: `"a"`, `"b"`, `"tie"`, `{"winner": …, …}` or a
/// probability that A is better.
pub struct CmdJudge {
    command: String,
    child: Child,
    stdin: ChildStdin,
    stdout: BufReader<ChildStdout>,
}

impl CmdJudge {
    pub fn start(command: &str) -> Result<CmdJudge> {
        let mut child = Command::new("sh")
            .arg("-c")
            .arg(command)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .with_context(|| format!("starting judge command `{command}`"))?;
        let stdin = child.stdin.take().ok_or_else(|| anyhow!("no stdin pipe"))?;
        let stdout = BufReader::new(child.stdout.take().ok_or_else(|| anyhow!("no stdout pipe"))?);
        Ok(CmdJudge { command: command.to_string(), child, stdin, stdout })
    }

    fn compare(&mut self, a: &Record, b: &Record) -> Result<Verdict, String> {
        let q = json!({
            "prompt_id": a.prompt_id, "prompt": a.prompt, "label": a.label,
            "a": a.response, "b": b.response, "a_index": a.sample_index, "b_index": b.sample_index,
        });
        let mut line = q.to_string();
        line.push('\n');
        // A judge that is gone is a failure of the run, not of one match.
        if let Err(e) = self.stdin.write_all(line.as_bytes()).and_then(|_| self.stdin.flush()) {
            return Err(format!("FATAL: writing to judge command `{}`: {e}", self.command));
        }
        let mut ans = String::new();
        match self.stdout.read_line(&mut ans) {
            Ok(0) => return Err(format!("FATAL: judge command `{}` closed its output", self.command)),
            Err(e) => return Err(format!("FATAL: reading judge command `{}`: {e}", self.command)),
            Ok(_) => {}
        }
        let v: Value = serde_json::from_str(ans.trim()).unwrap_or_else(|_| Value::String(ans.trim().to_string()));
        let w = parse_verdict(&v)?;
        Ok(Verdict { winner: w, note: v })
    }

    pub fn finish(mut self) -> Result<()> {
        drop(self.stdin);
        let st = self.child.wait()?;
        if !st.success() {
            bail!("judge command `{}` exited with {st}", self.command);
        }
        Ok(())
    }
}

/// A model judge behind an OpenAI-style `/v1/chat/completions` endpoint
/// (SGLang, vLLM, `arl-serve`). It is asked which answer is better and to
/// end with `[[A]]`, `[[B]]` or `[[tie]]`; the last such marker is the verdict.
pub struct ModelJudge {
    pub url: String,
    pub model: String,
    pub max_tokens: u32,
    /// Ask both orders; a verdict that flips with the order is a tie.
    pub swap: bool,
    pub http: reqwest::blocking::Client,
    pub api_key: Option<String>,
}

/// The judge's instruction (documented in `arl-reward --help`).
pub const JUDGE_PROMPT: &str = "You are a judge. Compare two answers to the same question and decide which one is better (correct, complete, clear). End your reply with [[A]] if answer A is better, [[B]] if answer B is better, or [[tie]] if they are equally good.";

impl ModelJudge {
    pub fn new(
        url: &str,
        model: &str,
        max_tokens: u32,
        swap: bool,
        timeout: Duration,
        api_key: Option<String>,
    ) -> Result<ModelJudge> {
        let http = arl_http::client::blocking_builder().timeout(timeout).build().context("HTTP client")?;
        let base = url.trim_end_matches('/');
        let url =
            if base.ends_with("/chat/completions") { base.to_string() } else { format!("{base}/v1/chat/completions") };
        Ok(ModelJudge { url, model: model.to_string(), max_tokens, swap, http, api_key })
    }

    fn ask(&self, q: &str, first: &str, second: &str) -> Result<(Winner, String), String> {
        let user = format!("{JUDGE_PROMPT}\n\n[Question]\n{q}\n\n[Answer A]\n{first}\n\n[Answer B]\n{second}");
        let body = json!({"model": self.model, "messages": [{"role": "user", "content": user}], "max_tokens": self.max_tokens, "temperature": 0.0});
        let mut req = self.http.post(&self.url).json(&body);
        if let Some(k) = &self.api_key {
            req = req.bearer_auth(k);
        }
        let resp = req.send().map_err(|e| format!("POST {}: {}", self.url, arl_http::client::why(&e)))?;
        let status = resp.status();
        let v: Value = resp.json().map_err(|e| format!("POST {}: HTTP {status}: reading the answer: {e}", self.url))?;
        if !status.is_success() {
            return Err(format!("POST {}: HTTP {status}: {v}", self.url));
        }
        let text = v.pointer("/choices/0/message/content").and_then(Value::as_str).unwrap_or("").to_string();
        match model_verdict(&text) {
            Some(w) => Ok((w, text)),
            None => Err(format!(
                "no [[A]], [[B]] or [[tie]] in the judge's reply `{}`",
                arl_env::sandbox::cut_middle(&text, 200)
            )),
        }
    }

    fn compare(&mut self, a: &Record, b: &Record) -> Result<Verdict, String> {
        let q = question(a);
        let (ra, rb) = (a.response.as_deref().unwrap_or(""), b.response.as_deref().unwrap_or(""));
        let (w1, t1) = self.ask(&q, ra, rb)?;
        if !self.swap {
            return Ok(Verdict { winner: w1, note: json!({"reply": t1}) });
        }
        let (w2, t2) = self.ask(&q, rb, ra)?;
        let w2 = match w2 {
            Winner::A => Winner::B,
            Winner::B => Winner::A,
            Winner::Tie => Winner::Tie,
        };
        let w = if w1 == w2 { w1 } else { Winner::Tie };
        Ok(Verdict { winner: w, note: json!({"reply": t1, "reply_swapped": t2, "consistent": w1 == w2}) })
    }
}

/// The last `[[A]]`, `[[B]]` or `[[tie]]` marker of a reply; else a reply
/// that is just `A`, `B` or `tie`.
pub fn model_verdict(text: &str) -> Option<Winner> {
    let lower = text.to_ascii_lowercase();
    let mut best: Option<(usize, Winner)> = None;
    for (m, w) in [("[[a]]", Winner::A), ("[[b]]", Winner::B), ("[[tie]]", Winner::Tie)] {
        if let Some(p) = lower.rfind(m) {
            if best.is_none_or(|(bp, _)| p > bp) {
                best = Some((p, w));
            }
        }
    }
    if let Some((_, w)) = best {
        return Some(w);
    }
    match lower.trim().trim_end_matches('.') {
        "a" => Some(Winner::A),
        "b" => Some(Winner::B),
        "tie" => Some(Winner::Tie),
        _ => None,
    }
}

/// Tournament-ranked rewards for every group of `recs` (by `prompt_id`);
/// results in input order. A group of one has no opponent: its record is an
/// error. A judge failure marked FATAL (a `cmd` judge that died) or any
/// judge error under `strict` fails the run.
pub fn score_groups(
    format: Format,
    judge: &mut Judge,
    recs: &[Record],
    seed: u64,
    strict: bool,
) -> Result<Vec<Result<Score, ScoreError>>> {
    let groups = super::external::groups(recs).map_err(arl_core::cli::data)?;
    let mut out: Vec<Option<Result<Score, ScoreError>>> = (0..recs.len()).map(|_| None).collect();
    let mut judge_errors = 0usize;
    for g in groups {
        let members: Vec<&Record> = g.iter().map(|&i| &recs[i]).collect();
        if let Some(k) = members.iter().position(|r| r.response.is_none()) {
            let id = members[k].prompt_id.clone().unwrap_or_default();
            for &i in &g {
                out[i] = Some(Err(ScoreError(format!(
                    "field `response`: missing in group `{id}`; a tournament needs every response"
                ))));
            }
            continue;
        }
        if members.len() < 2 {
            out[g[0]] = Some(Err(ScoreError(format!(
                "group `{}` has one sample; a tournament needs at least two (`arl-rollout -n 2` or more)",
                members[0].prompt_id.clone().unwrap_or_default()
            ))));
            continue;
        }
        let gid = members[0].prompt_id.clone().unwrap_or_default();
        let gseed = arl_core::rng::mix(&[
            seed,
            gid.bytes().fold(0xcbf2_9ce4_8422_2325u64, |h, b| (h ^ b as u64).wrapping_mul(0x100_0000_01b3)),
        ]);
        let mut fatal: Option<String> = None;
        let st = tournament::run(
            format,
            members.len(),
            gseed,
            |a, b| {
                if fatal.is_some() {
                    return Err("skipped".into());
                }
                let r = judge.compare(members[a], members[b]);
                if let Err(e) = &r {
                    if e.starts_with("FATAL: ") {
                        fatal = Some(e.trim_start_matches("FATAL: ").to_string());
                    }
                }
                r
            },
            strict,
        )
        .map_err(|e| {
            arl_core::cli::hint(anyhow!("group `{gid}`: {e}"), "judge errors count as ties without `--judge-strict`")
        })?;
        if let Some(e) = fatal {
            bail!("group `{gid}`: {e}");
        }
        judge_errors += st.matches.iter().filter(|m| m.error.is_some()).count();
        let label = |k: usize| members[k].sample_index.map_or(json!(k), |s| json!(s));
        let ranking: Vec<Value> = st.order().into_iter().map(label).collect();
        for (k, &i) in g.iter().enumerate() {
            let mut d = json!({
                "arena": format.name(),
                "judge": judge.name(),
                "group_size": members.len(),
                "rank": st.ranks[k],
                "wins": st.wins[k],
                "ties": st.ties[k],
                "losses": st.losses[k],
                "ranking": ranking,
                "matches": st.matches_of(k, &label),
            });
            if format == Format::Elimination {
                d["rounds"] = json!(st.rounds);
                d["advanced"] = json!(st.advanced[k]);
                d["byes"] = json!(st.byes[k]);
            }
            let explain = match format {
                Format::RoundRobin => format!(
                    "round robin ({}): {} wins, {} ties, {} losses of {}; rank {} of {}",
                    judge.name(),
                    st.wins[k],
                    st.ties[k],
                    st.losses[k],
                    members.len() - 1,
                    st.ranks[k],
                    members.len()
                ),
                Format::Elimination => format!(
                    "elimination ({}): advanced {} of {} rounds; rank {} of {}",
                    judge.name(),
                    st.advanced[k],
                    st.rounds,
                    st.ranks[k],
                    members.len()
                ),
            };
            out[i] = Some(Ok(Score { reward: st.rewards[k], detail: d, explain }));
        }
    }
    if judge_errors > 0 {
        arl_core::cli::warn(
            "arl-reward",
            format!("{judge_errors} judge errors counted as ties (see `error` in reward_detail.matches)"),
        );
    }
    Ok(out.into_iter().map(|x| x.unwrap_or_else(|| Err(ScoreError("internal: not scored".into())))).collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn verdicts() {
        assert_eq!(model_verdict("B is wrong, so [[A]]. Final: [[B]]"), Some(Winner::B));
        assert_eq!(model_verdict(" tie. "), Some(Winner::Tie));
        assert_eq!(model_verdict("both fine"), None);
        assert_eq!(parse_verdict(&json!({"winner": "B"})), Ok(Winner::B));
        assert_eq!(parse_verdict(&json!(0.8)), Ok(Winner::A));
        assert_eq!(parse_verdict(&json!(0.5)), Ok(Winner::Tie));
        assert!(parse_verdict(&json!(2)).is_err());
        assert!(parse_verdict(&json!("c")).is_err());
    }
}
