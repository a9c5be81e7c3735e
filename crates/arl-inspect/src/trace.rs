//! `arl-inspect trace`: reads a rollout trace (`arl-rollout --trace`, its
//! format in `arl_rollout::trace`), says where the run's wall time went and
//! draws the run as a timeline (one self-contained HTML page).
//!
//! The wall time is attributed along the critical path: the sample that
//! finished last. Its time splits into what came before it started (the
//! rollout's start-up, then its group waiting for its turn), its own phases
//! (waiting for a `--concurrency` slot, generation, tool calls, retries,
//! aborted generation, and the rollout's own work between them), and what
//! came after it (writing the output). These segments partition the wall
//! time, so they add up to it.
use anyhow::{Context, Result};
use arl_core::cli;
use serde_json::{json, Map, Value};
use std::collections::HashMap;
use std::fmt::Write as _;
use std::io::Read;
use std::path::Path;

/// The trace format version this reads (the `run` line's `version`).
pub const VERSION: u64 = 1;

/// Most sample lanes drawn (the slowest, and the one that finished last).
const MAX_SAMPLE_LANES: usize = 1000;

/// Where a moment of the run went.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Phase {
    /// Before the groups started: reading and rendering the prompts.
    Startup,
    /// The sample's group waiting for its turn (groups start as others end).
    GroupWait,
    /// A request waiting for a `--concurrency` slot.
    SlotWait,
    /// A request on the wire until its answer was in.
    Generation,
    /// Tool calls.
    Tool,
    /// Failed attempts and the waits before their retries.
    Retry,
    /// Generation the server or the run aborted.
    Aborted,
    /// The rollout's own work between phases (parsing, tokenising, rendering).
    Client,
    /// After the last sample ended (writing the output).
    Finish,
}

impl Phase {
    pub const ALL: [Phase; 9] = [
        Phase::Startup,
        Phase::GroupWait,
        Phase::SlotWait,
        Phase::Generation,
        Phase::Tool,
        Phase::Retry,
        Phase::Aborted,
        Phase::Client,
        Phase::Finish,
    ];

    /// The key in `--json`.
    pub fn key(self) -> &'static str {
        match self {
            Phase::Startup => "startup",
            Phase::GroupWait => "waiting_to_start",
            Phase::SlotWait => "waiting_for_slot",
            Phase::Generation => "generation",
            Phase::Tool => "tools",
            Phase::Retry => "retries",
            Phase::Aborted => "aborted",
            Phase::Client => "between_phases",
            Phase::Finish => "after_last_sample",
        }
    }

    pub fn label(self) -> &'static str {
        match self {
            Phase::Startup => "start-up (read, render prompts)",
            Phase::GroupWait => "waiting to start (group queued)",
            Phase::SlotWait => "waiting for a request slot",
            Phase::Generation => "generation",
            Phase::Tool => "tool calls",
            Phase::Retry => "retries (failed tries, backoff)",
            Phase::Aborted => "aborted generation",
            Phase::Client => "rollout between phases",
            Phase::Finish => "after the last sample (output)",
        }
    }

    fn class(self) -> &'static str {
        match self {
            Phase::Startup => "p-startup",
            Phase::GroupWait => "p-group",
            Phase::SlotWait => "p-slot",
            Phase::Generation => "p-gen",
            Phase::Tool => "p-tool",
            Phase::Retry => "p-retry",
            Phase::Aborted => "p-abort",
            Phase::Client => "p-client",
            Phase::Finish => "p-finish",
        }
    }

    /// Which phase shows where spans overlap (a sample's spans do not,
    /// except tool calls run together).
    fn rank(self) -> u8 {
        match self {
            Phase::Generation => 6,
            Phase::Aborted => 5,
            Phase::Retry => 4,
            Phase::Tool => 3,
            Phase::SlotWait => 2,
            _ => 0,
        }
    }
}

/// One timed stretch of a sample.
#[derive(Debug, Clone)]
pub struct Span {
    pub phase: Phase,
    pub start: f64,
    pub end: f64,
    /// What it was, for the timeline's tooltip.
    pub what: String,
}

#[derive(Debug, Clone)]
pub struct Sample {
    pub id: u64,
    pub prompt_id: String,
    pub sample_index: u64,
    pub start: f64,
    /// From `sample_end`; none when the run stopped first.
    pub end: Option<f64>,
    pub status: Option<String>,
    pub turns: u64,
    pub tool_calls: u64,
    pub spans: Vec<Span>,
}

impl Sample {
    /// When it ended: its `sample_end`, else its last event.
    pub fn finish(&self) -> f64 {
        self.end.unwrap_or_else(|| self.spans.iter().map(|s| s.end).fold(self.start, f64::max))
    }

    pub fn name(&self) -> String {
        format!("{}#{}", self.prompt_id, self.sample_index)
    }

    /// Its time from start to finish, split by phase (an exact partition:
    /// where spans overlap, the higher-ranked phase counts; where none is,
    /// the rollout's own work).
    pub fn partition(&self) -> Vec<(Phase, f64, f64)> {
        let (lo, hi) = (self.start, self.finish());
        let mut cuts: Vec<f64> = vec![lo, hi];
        for s in &self.spans {
            cuts.push(s.start.clamp(lo, hi));
            cuts.push(s.end.clamp(lo, hi));
        }
        cuts.sort_by(f64::total_cmp);
        cuts.dedup();
        let mut out: Vec<(Phase, f64, f64)> = Vec::new();
        for w in cuts.windows(2) {
            let (a, b) = (w[0], w[1]);
            if b <= a {
                continue;
            }
            let mid = 0.5 * (a + b);
            let phase = self
                .spans
                .iter()
                .filter(|s| s.start <= mid && mid < s.end)
                .map(|s| s.phase)
                .max_by_key(|p| p.rank())
                .unwrap_or(Phase::Client);
            match out.last_mut() {
                Some(last) if last.0 == phase && last.2 == a => last.2 = b,
                _ => out.push((phase, a, b)),
            }
        }
        out
    }

    fn phase_secs(&self) -> HashMap<Phase, f64> {
        let mut m = HashMap::new();
        for (p, a, b) in self.partition() {
            *m.entry(p).or_insert(0.0) += b - a;
        }
        m
    }
}

/// A request's hold on a `--concurrency` slot: the attempt on the wire and,
/// when it failed, the wait before its retry (the slot is held through it).
#[derive(Debug, Clone)]
pub struct SlotItem {
    pub sample: usize,
    pub segs: Vec<Span>,
}

impl SlotItem {
    fn start(&self) -> f64 {
        self.segs.first().map_or(0.0, |s| s.start)
    }
    fn end(&self) -> f64 {
        self.segs.iter().map(|s| s.end).fold(self.start(), f64::max)
    }
}

/// A whole trace, read.
#[derive(Debug, Default)]
pub struct Trace {
    pub source: String,
    pub start: Option<String>,
    pub concurrency: Option<u64>,
    pub groups: Option<u64>,
    pub ready: Option<f64>,
    /// `run_end`'s time: the wall time.
    pub run_end: Option<f64>,
    pub outcome: Option<String>,
    pub samples: Vec<Sample>,
    pub slots: Vec<SlotItem>,
    /// The latest time any line mentions.
    pub last: f64,
}

/// One line's fields, with errors that name the file, the line and the field.
struct Line<'a> {
    src: &'a str,
    n: usize,
    v: &'a Map<String, Value>,
}

impl Line<'_> {
    fn err(&self, msg: impl std::fmt::Display) -> anyhow::Error {
        cli::data(format!("`{}:{}`: {msg}", self.src, self.n))
    }
    fn num(&self, f: &str) -> Result<f64> {
        match self.v.get(f).and_then(Value::as_f64) {
            Some(x) if x.is_finite() && x >= 0.0 => Ok(x),
            _ => Err(self.err(format_args!("field `{f}`: expected a number of seconds (≥ 0)"))),
        }
    }
    fn opt_num(&self, f: &str) -> Result<Option<f64>> {
        match self.v.get(f) {
            None | Some(Value::Null) => Ok(None),
            Some(_) => self.num(f).map(Some),
        }
    }
    fn uint(&self, f: &str) -> Result<u64> {
        self.v
            .get(f)
            .and_then(Value::as_u64)
            .ok_or_else(|| self.err(format_args!("field `{f}`: expected an integer ≥ 0")))
    }
    fn opt_uint(&self, f: &str) -> Result<Option<u64>> {
        match self.v.get(f) {
            None | Some(Value::Null) => Ok(None),
            Some(_) => self.uint(f).map(Some),
        }
    }
    fn string(&self, f: &str) -> Result<&str> {
        self.v.get(f).and_then(Value::as_str).ok_or_else(|| self.err(format_args!("field `{f}`: expected a string")))
    }
    fn opt_string(&self, f: &str) -> Result<Option<&str>> {
        match self.v.get(f) {
            None | Some(Value::Null) => Ok(None),
            Some(_) => self.string(f).map(Some),
        }
    }
    /// `end` is not before `start`.
    fn ordered(&self, a: (&str, f64), b: (&str, f64)) -> Result<()> {
        if b.1 + 1e-9 < a.1 {
            return Err(self.err(format_args!("field `{}` ({}) is before `{}` ({})", b.0, b.1, a.0, a.1)));
        }
        Ok(())
    }
}

impl Trace {
    /// Reads a trace file (`-`: stdin).
    pub fn read(path: &Path) -> Result<Trace> {
        let mut text = String::new();
        let src = path.display().to_string();
        if path.as_os_str() == "-" {
            std::io::stdin().read_to_string(&mut text).context("reading stdin")?;
        } else {
            std::fs::File::open(path)
                .and_then(|mut f| f.read_to_string(&mut text))
                .with_context(|| format!("cannot read `{src}`"))?;
        }
        Trace::parse(&text, if path.as_os_str() == "-" { "<stdin>" } else { &src })
    }

    /// Reads a trace from its text; `src` names it in errors.
    ///
    /// Long (about 130 lines) on purpose: one arm per event type, each
    /// checking that type's fields where it reads them.
    pub fn parse(text: &str, src: &str) -> Result<Trace> {
        let mut t = Trace { source: src.to_string(), ..Default::default() };
        let mut by_id: HashMap<u64, usize> = HashMap::new();
        // (sample, turn, attempt) of each request's slot item.
        let mut attempts: HashMap<(usize, u64, u64), usize> = HashMap::new();
        let mut seen_run = false;
        for (i, raw) in text.lines().enumerate() {
            let n = i + 1;
            if raw.trim().is_empty() {
                continue;
            }
            let v: Value = serde_json::from_str(raw).map_err(|e| cli::data(format!("`{src}:{n}`: not JSON: {e}")))?;
            let Some(obj) = v.as_object() else {
                return Err(cli::data(format!("`{src}:{n}`: expected a JSON object (one trace event)")));
            };
            let l = Line { src, n, v: obj };
            let ty = l.string("type")?;
            if !seen_run && ty != "run" {
                return Err(cli::hint(
                    l.err("not a rollout trace: the first event is not `run`"),
                    "traces are written by `arl-rollout --trace FILE`",
                ));
            }
            let sample_of = |l: &Line, by_id: &HashMap<u64, usize>| -> Result<usize> {
                let id = l.uint("sample")?;
                by_id
                    .get(&id)
                    .copied()
                    .ok_or_else(|| l.err(format_args!("sample {id} has no `sample_start` line before")))
            };
            match ty {
                "run" => {
                    if seen_run {
                        return Err(l.err("a second `run` event: one trace holds one run"));
                    }
                    seen_run = true;
                    let version = l.uint("version")?;
                    if version > VERSION {
                        return Err(l.err(format_args!(
                            "field `version`: trace format {version}; this arl-inspect reads up to {VERSION}"
                        )));
                    }
                    t.start = l.opt_string("start")?.map(str::to_string);
                    t.concurrency = l.opt_uint("concurrency")?;
                }
                "ready" => {
                    t.ready = Some(l.num("t")?);
                    t.groups = l.opt_uint("groups")?;
                }
                "sample_start" => {
                    let id = l.uint("sample")?;
                    if by_id.contains_key(&id) {
                        return Err(l.err(format_args!("field `sample`: sample {id} starts twice")));
                    }
                    by_id.insert(id, t.samples.len());
                    t.samples.push(Sample {
                        id,
                        prompt_id: l.string("prompt_id")?.to_string(),
                        sample_index: l.uint("sample_index")?,
                        start: l.num("t")?,
                        end: None,
                        status: None,
                        turns: 0,
                        tool_calls: 0,
                        spans: Vec::new(),
                    });
                }
                "request" => {
                    let s = sample_of(&l, &by_id)?;
                    let (turn, attempt) = (l.uint("turn")?, l.uint("attempt")?);
                    let queued = l.num("queued")?;
                    let sent = l.opt_num("sent")?;
                    let answered = l.num("answered")?;
                    let outcome = l.string("outcome")?;
                    let finish = l.opt_string("finish")?;
                    let out_tokens = l.opt_uint("output_tokens")?.unwrap_or(0);
                    let error = l.opt_string("error")?;
                    if let Some(sent) = sent {
                        l.ordered(("queued", queued), ("sent", sent))?;
                        l.ordered(("sent", sent), ("answered", answered))?;
                    } else {
                        l.ordered(("queued", queued), ("answered", answered))?;
                    }
                    let phase = match outcome {
                        "ok" => Phase::Generation,
                        "aborted" | "cancelled" => Phase::Aborted,
                        "retry" | "error" => Phase::Retry,
                        other => {
                            return Err(l.err(format_args!(
                                "field `outcome`: `{other}`; expected ok, aborted, retry, error or cancelled"
                            )))
                        }
                    };
                    let head = format!("turn {turn}, attempt {attempt}");
                    let sample = &mut t.samples[s];
                    let wait_end = sent.unwrap_or(answered);
                    sample.spans.push(Span {
                        phase: Phase::SlotWait,
                        start: queued,
                        end: wait_end,
                        what: format!("{head}: waiting for a slot, {:.3} s", wait_end - queued),
                    });
                    if let Some(sent) = sent {
                        let mut what = format!("{head}: {outcome}, {:.3} s, {out_tokens} tokens", answered - sent);
                        if let Some(f) = finish {
                            let _ = write!(what, ", finish {f}");
                        }
                        if let Some(e) = error {
                            let _ = write!(what, " ({e})");
                        }
                        let span = Span { phase, start: sent, end: answered, what };
                        sample.spans.push(span.clone());
                        attempts.insert((s, turn, attempt), t.slots.len());
                        t.slots.push(SlotItem { sample: s, segs: vec![span] });
                    }
                    t.last = t.last.max(answered);
                }
                "backoff" => {
                    let s = sample_of(&l, &by_id)?;
                    let (turn, attempt) = (l.uint("turn")?, l.uint("attempt")?);
                    let (start, end) = (l.num("start")?, l.num("end")?);
                    l.ordered(("start", start), ("end", end))?;
                    let span = Span {
                        phase: Phase::Retry,
                        start,
                        end,
                        what: format!("turn {turn}: waiting {:.3} s before retry {attempt}", end - start),
                    };
                    t.samples[s].spans.push(span.clone());
                    // The slot is held through the wait after the failed attempt.
                    if let Some(&k) = attempt.checked_sub(1).and_then(|a| attempts.get(&(s, turn, a))) {
                        t.slots[k].segs.push(span);
                    }
                    t.last = t.last.max(end);
                }
                "tool" => {
                    let s = sample_of(&l, &by_id)?;
                    let turn = l.uint("turn")?;
                    let name = l.string("name")?;
                    let (start, end) = (l.num("start")?, l.num("end")?);
                    l.ordered(("start", start), ("end", end))?;
                    let error = l.v.get("error").and_then(Value::as_bool).unwrap_or(false);
                    let what = format!(
                        "turn {turn}: tool `{name}`, {:.3} s{}",
                        end - start,
                        if error { " (error)" } else { "" }
                    );
                    t.samples[s].spans.push(Span { phase: Phase::Tool, start, end, what });
                    t.last = t.last.max(end);
                }
                "sample_end" => {
                    let s = sample_of(&l, &by_id)?;
                    let end = l.num("t")?;
                    let sample = &mut t.samples[s];
                    l.ordered(("sample_start t", sample.start), ("t", end))?;
                    sample.end = Some(end);
                    sample.status = l.opt_string("status")?.map(str::to_string);
                    sample.turns = l.opt_uint("turns")?.unwrap_or(0);
                    sample.tool_calls = l.opt_uint("tool_calls")?.unwrap_or(0);
                    t.last = t.last.max(end);
                }
                "run_end" => {
                    t.run_end = Some(l.num("t")?);
                    t.outcome = l.opt_string("outcome")?.map(str::to_string);
                }
                other => return Err(l.err(format_args!("field `type`: unknown event `{other}`"))),
            }
        }
        if !seen_run {
            return Err(cli::hint(
                cli::data(format!("`{src}`: empty: no trace events")),
                "traces are written by `arl-rollout --trace FILE`",
            ));
        }
        Ok(t)
    }

    /// The run's wall time: `run_end`, else the last event (the run did not finish).
    pub fn wall(&self) -> f64 {
        self.run_end.unwrap_or(self.last).max(self.last).max(self.ready.unwrap_or(0.0))
    }

    /// The sample that finished last.
    pub fn critical(&self) -> Option<usize> {
        (0..self.samples.len()).max_by(|&a, &b| self.samples[a].finish().total_cmp(&self.samples[b].finish()))
    }
}

/// Where the wall time went.
pub struct Summary {
    pub wall: f64,
    pub critical: Option<usize>,
    /// The critical path's segments, by phase (they partition the wall time).
    pub path: Vec<(Phase, f64)>,
    /// Summed over every sample (sample-seconds).
    pub totals: Vec<(Phase, f64)>,
    /// Busy slot-seconds (attempts on the wire, retry waits).
    pub slot_busy: f64,
    /// Samples by duration, slowest first.
    pub slowest: Vec<usize>,
    /// When 90% of the samples had finished, and the samples that finished after.
    pub tail: Option<(f64, Vec<usize>)>,
}

pub fn summarize(t: &Trace) -> Summary {
    let wall = t.wall();
    let critical = t.critical();
    let mut path: HashMap<Phase, f64> = HashMap::new();
    match critical {
        Some(c) => {
            let s = &t.samples[c];
            let ready = t.ready.unwrap_or(0.0).min(s.start);
            path.insert(Phase::Startup, ready);
            path.insert(Phase::GroupWait, s.start - ready);
            for (p, secs) in s.phase_secs() {
                *path.entry(p).or_insert(0.0) += secs;
            }
            path.insert(Phase::Finish, (wall - s.finish()).max(0.0));
        }
        None => {
            let ready = t.ready.unwrap_or(wall).min(wall);
            path.insert(Phase::Startup, ready);
            path.insert(Phase::Finish, wall - ready);
        }
    }
    let mut totals: HashMap<Phase, f64> = HashMap::new();
    for s in &t.samples {
        *totals.entry(Phase::GroupWait).or_insert(0.0) += (s.start - t.ready.unwrap_or(0.0).min(s.start)).max(0.0);
        for (p, secs) in s.phase_secs() {
            *totals.entry(p).or_insert(0.0) += secs;
        }
    }
    let slot_busy = t.slots.iter().flat_map(|i| &i.segs).map(|s| s.end - s.start).sum();
    let mut slowest: Vec<usize> = (0..t.samples.len()).collect();
    let dur = |i: usize| t.samples[i].finish() - t.samples[i].start;
    slowest.sort_by(|&a, &b| dur(b).total_cmp(&dur(a)).then(a.cmp(&b)));
    let tail = {
        let mut ends: Vec<(f64, usize)> = t.samples.iter().enumerate().map(|(i, s)| (s.finish(), i)).collect();
        ends.sort_by(|a, b| a.0.total_cmp(&b.0));
        let k = ((ends.len() as f64 * 0.9).floor() as usize).max(1);
        (k < ends.len()).then(|| (ends[k - 1].0, ends[k..].iter().rev().map(|&(_, i)| i).collect()))
    };
    let order = |m: HashMap<Phase, f64>| Phase::ALL.iter().filter_map(|p| m.get(p).map(|&x| (*p, x))).collect();
    Summary { wall, critical, path: order(path), totals: order(totals), slot_busy, slowest, tail }
}

fn pct(x: f64, wall: f64) -> f64 {
    if wall > 0.0 {
        100.0 * x / wall
    } else {
        0.0
    }
}

/// What one sample spent, for the lists.
fn breakdown(s: &Sample) -> String {
    let m = s.phase_secs();
    let get = |p: Phase| m.get(&p).copied().unwrap_or(0.0);
    format!(
        "generation {:.3} s, tools {:.3} s, waiting for a slot {:.3} s{}",
        get(Phase::Generation),
        get(Phase::Tool),
        get(Phase::SlotWait),
        match get(Phase::Retry) + get(Phase::Aborted) {
            x if x > 0.0 => format!(", retries/aborted {x:.3} s"),
            _ => String::new(),
        }
    )
}

fn shape(s: &Sample) -> String {
    let status = s.status.as_deref().unwrap_or("unfinished");
    let calls = if s.tool_calls == 1 { "call" } else { "calls" };
    let turns = if s.turns == 1 { "turn" } else { "turns" };
    format!("{status}, {} {turns}, {} tool {calls}", s.turns, s.tool_calls)
}

/// The summary as text.
pub fn text(t: &Trace, s: &Summary, top: usize) -> String {
    let mut o = String::new();
    let _ = writeln!(
        o,
        "{}: {} samples{}{}{}",
        t.source,
        t.samples.len(),
        t.groups.map(|g| format!(" ({g} groups)")).unwrap_or_default(),
        t.concurrency.map(|c| format!(", --concurrency {c}")).unwrap_or_default(),
        t.start.as_deref().map(|x| format!(", started {x}")).unwrap_or_default()
    );
    let _ = writeln!(
        o,
        "wall time {:.3} s{}",
        s.wall,
        match (t.run_end, t.outcome.as_deref()) {
            (None, _) => " (the run did not finish: no `run_end`; up to its last event)".to_string(),
            (Some(_), Some("ok")) | (Some(_), None) => String::new(),
            (Some(_), Some(other)) => format!(" (run {other})"),
        }
    );
    o.push('\n');
    match s.critical {
        Some(c) => {
            let cs = &t.samples[c];
            let _ = writeln!(
                o,
                "critical path: sample {} (finished last, at {:.3} s; {})",
                cs.name(),
                cs.finish(),
                shape(cs)
            );
        }
        None => o.push_str("critical path: no samples\n"),
    }
    let mut sum = 0.0;
    for &(p, x) in &s.path {
        sum += x;
        let _ = writeln!(o, "  {:<34} {:>10.3} s {:>6.1}%", p.label(), x, pct(x, s.wall));
    }
    let _ = writeln!(o, "  {:<34} {:>10.3} s {:>6.1}%", "total", sum, pct(sum, s.wall));
    o.push('\n');
    let tot = |p: Phase| s.totals.iter().find(|(q, _)| *q == p).map_or(0.0, |x| x.1);
    let _ = writeln!(
        o,
        "all samples (sample-seconds): generation {:.3} s, tool calls {:.3} s, waiting for a slot {:.3} s, waiting to start {:.3} s, retries/aborted {:.3} s",
        tot(Phase::Generation),
        tot(Phase::Tool),
        tot(Phase::SlotWait),
        tot(Phase::GroupWait),
        tot(Phase::Retry) + tot(Phase::Aborted)
    );
    if let Some(c) = t.concurrency.filter(|&c| c > 0 && s.wall > 0.0) {
        let _ = writeln!(
            o,
            "request slots busy {:.1}% of the wall time (on average {:.2} of {c} in use)",
            pct(s.slot_busy, s.wall * c as f64),
            s.slot_busy / s.wall
        );
    }
    if let Some((t90, late)) = &s.tail {
        let last = late.first().map_or(*t90, |&i| t.samples[i].finish());
        let names: Vec<String> = late.iter().take(top.max(1)).map(|&i| t.samples[i].name()).collect();
        let _ = writeln!(
            o,
            "long tail: 90% of the samples had finished at {t90:.3} s; the last {} took {:.3} s more ({:.1}% of the wall time): {}{}",
            late.len(),
            last - t90,
            pct(last - t90, s.wall),
            names.join(", "),
            if late.len() > names.len() { ", …" } else { "" }
        );
    }
    if top > 0 && !s.slowest.is_empty() {
        o.push_str("slowest samples:\n");
        for &i in s.slowest.iter().take(top) {
            let x = &t.samples[i];
            let d = x.finish() - x.start;
            let _ = writeln!(
                o,
                "  {:<24} {:>9.3} s {:>6.1}% of the wall time ({:.3}–{:.3} s); {}; {}",
                x.name(),
                d,
                pct(d, s.wall),
                x.start,
                x.finish(),
                shape(x),
                breakdown(x)
            );
        }
    }
    o
}

/// The summary as JSON.
pub fn to_json(t: &Trace, s: &Summary, top: usize) -> Value {
    let phases = |v: &[(Phase, f64)]| {
        Value::Object(v.iter().map(|(p, x)| (p.key().to_string(), json!(x))).collect::<Map<String, Value>>())
    };
    let sample = |i: usize| {
        let x = &t.samples[i];
        let m = x.phase_secs();
        json!({
            "sample": x.id, "prompt_id": x.prompt_id, "sample_index": x.sample_index,
            "start": x.start, "end": x.finish(),
            "seconds": x.finish() - x.start, "share_of_wall": (x.finish() - x.start) / s.wall.max(1e-12),
            "status": x.status, "turns": x.turns, "tool_calls": x.tool_calls,
            "phases": phases(&Phase::ALL.iter().filter_map(|p| m.get(p).map(|&v| (*p, v))).collect::<Vec<_>>()),
        })
    };
    json!({
        "source": t.source,
        "start": t.start,
        "finished": t.run_end.is_some(),
        "outcome": t.outcome,
        "wall": s.wall,
        "samples": t.samples.len(),
        "groups": t.groups,
        "concurrency": t.concurrency,
        "critical_path": {
            "sample": s.critical.map(sample),
            "phases": phases(&s.path),
            "total": s.path.iter().map(|x| x.1).sum::<f64>(),
        },
        "totals": phases(&s.totals),
        "slot_busy_seconds": s.slot_busy,
        "long_tail": s.tail.as_ref().map(|(t90, late)| json!({
            "p90_finished_at": t90,
            "samples": late.iter().map(|&i| t.samples[i].name()).collect::<Vec<_>>(),
        })),
        "slowest": s.slowest.iter().take(top).map(|&i| sample(i)).collect::<Vec<_>>(),
    })
}

/// XML/HTML text escaping (the web environment's).
use arl_env::web::site::esc;

/// Lanes for the slot items: each goes to the first lane free when it
/// starts (at most as many lanes as were ever busy at once).
pub fn slot_lanes(items: &[SlotItem]) -> Vec<usize> {
    let mut order: Vec<usize> = (0..items.len()).collect();
    order.sort_by(|&a, &b| items[a].start().total_cmp(&items[b].start()));
    let mut free_at: Vec<f64> = Vec::new();
    let mut lane = vec![0; items.len()];
    for i in order {
        let (a, b) = (items[i].start(), items[i].end());
        let l = match free_at.iter().position(|&f| f <= a + 1e-6) {
            Some(l) => l,
            None => {
                free_at.push(0.0);
                free_at.len() - 1
            }
        };
        free_at[l] = b;
        lane[i] = l;
    }
    lane
}

/// Geometry of the charts.
struct Chart {
    wall: f64,
    left: f64,
    width: f64,
}

const LANE: f64 = 14.0;
const GAP: f64 = 4.0;
const AXIS: f64 = 26.0;

impl Chart {
    fn x(&self, t: f64) -> f64 {
        self.left + t / self.wall * self.width
    }

    fn axis(&self, o: &mut String, height: f64) {
        let step = nice_step(self.wall / 10.0);
        let decimals = if step >= 1.0 { 0 } else { (-step.log10()).ceil() as usize };
        let mut k = 0u64;
        loop {
            let t = k as f64 * step;
            if t > self.wall * 1.0001 {
                break;
            }
            let x = self.x(t);
            let _ = write!(
                o,
                r#"<line class="grid" x1="{x:.1}" y1="{a:.1}" x2="{x:.1}" y2="{height:.1}"/><text class="tick" x="{x:.1}" y="{y:.1}">{t:.decimals$} s</text>"#,
                a = AXIS - 6.0,
                y = AXIS - 10.0,
            );
            k += 1;
        }
    }

    /// A bar; `sample` and `name` say whose it is (for the hover box and the click).
    fn rect(&self, o: &mut String, span: &Span, y: f64, h: f64, sample: usize, name: &str) {
        let x = self.x(span.start);
        let w = (self.x(span.end) - x).max(0.75);
        let _ = write!(
            o,
            r#"<rect class="{}" data-s="{sample}" data-name="{} — " x="{x:.2}" y="{y:.1}" width="{w:.2}" height="{h:.1}"><title>{}</title></rect>"#,
            span.phase.class(),
            esc(name),
            esc(&span.what)
        );
    }
}

/// 1, 2 or 5 times a power of ten, at least `x`.
fn nice_step(x: f64) -> f64 {
    if x <= 0.0 || !x.is_finite() {
        return 1.0;
    }
    let p = 10f64.powf(x.log10().floor());
    [1.0, 2.0, 5.0, 10.0].iter().map(|m| m * p).find(|&s| s >= x).unwrap_or(10.0 * p)
}

const STYLE: &str = r"
body{font:13px/1.4 system-ui,sans-serif;margin:16px 24px;color:#222}
h1{font-size:20px;margin:0 0 4px}h2{font-size:15px;margin:22px 0 6px}
.meta{color:#555;margin:0 0 10px}
table{border-collapse:collapse}td,th{padding:2px 10px;text-align:right}td:first-child,th:first-child{text-align:left}
tr.total td{border-top:1px solid #999;font-weight:600}
.legend span{display:inline-block;margin-right:14px}.legend i{display:inline-block;width:12px;height:12px;margin-right:4px;vertical-align:-2px;border:1px solid #0003}
svg{display:block;max-width:100%;height:auto}
.tick{font-size:10px;fill:#666;text-anchor:middle}.lane{font-size:11px;fill:#333}.lane.crit{font-weight:700;fill:#b00}
.grid{stroke:#0000001a}.life{stroke:#999;stroke-width:1}
rect{stroke:#fff;stroke-width:1}rect.hl{stroke:#000;stroke-width:1.5}
.p-startup{fill:#bbb;background:#bbb}.p-group{fill:#e6e6e6;background:#e6e6e6}.p-slot{fill:#f2b134;background:#f2b134}
.p-gen{fill:#3b7dd8;background:#3b7dd8}.p-tool{fill:#2ca25f;background:#2ca25f}.p-retry{fill:#d7301f;background:#d7301f}
.p-abort{fill:#7a3fa0;background:#7a3fa0}.p-client{fill:#999;background:#999}.p-finish{fill:#bbb;background:#bbb}
#tip{position:fixed;pointer-events:none;background:#fff;border:1px solid #888;padding:3px 6px;font-size:12px;max-width:520px;box-shadow:0 1px 4px #0003}
pre{background:#f6f6f6;padding:8px;overflow:auto}
";

/// Hover shows a bar's details; a click marks every bar of its sample.
const SCRIPT: &str = r#"
'use strict';
(function () {
  var tip = document.getElementById('tip');
  var marked = [];
  document.querySelectorAll('svg rect[data-s]').forEach(function (r) {
    var t = r.querySelector('title');
    var text = t ? t.textContent : '';
    r.addEventListener('mousemove', function (e) {
      tip.textContent = (r.getAttribute('data-name') || '') + text;
      tip.style.left = (e.clientX + 12) + 'px';
      tip.style.top = (e.clientY + 12) + 'px';
      tip.hidden = false;
    });
    r.addEventListener('mouseleave', function () { tip.hidden = true; });
    r.addEventListener('click', function () {
      marked.forEach(function (m) { m.classList.remove('hl'); });
      marked = Array.prototype.slice.call(document.querySelectorAll('svg rect[data-s="' + r.getAttribute('data-s') + '"]'));
      marked.forEach(function (m) { m.classList.add('hl'); });
    });
  });
  document.body.setAttribute('data-timeline', 'ready');
})();
"#;

/// The timeline as one self-contained HTML page (inline CSS, SVG and script;
/// nothing fetched).
///
/// Long (about 140 lines) on purpose: the page top to bottom, each part
/// (header, table, the two charts) written where it appears.
pub fn html(t: &Trace, s: &Summary, top: usize) -> String {
    let wall = s.wall.max(1e-9);
    let chart = Chart { wall, left: 190.0, width: 1000.0 };
    let width = chart.left + chart.width + 20.0;
    let mut o = String::new();
    let _ = write!(
        o,
        r#"<!DOCTYPE html><html lang="en"><head><meta charset="utf-8"><link rel="icon" href="data:,"><title>Rollout trace: {}</title><style>{STYLE}</style></head><body>"#,
        esc(&t.source)
    );
    let _ = write!(
        o,
        r#"<h1>Rollout trace</h1><p class="meta">{} · {} samples{}{} · wall time {:.3} s{}</p>"#,
        esc(&t.source),
        t.samples.len(),
        t.concurrency.map(|c| format!(" · --concurrency {c}")).unwrap_or_default(),
        t.start.as_deref().map(|x| format!(" · started {}", esc(x))).unwrap_or_default(),
        s.wall,
        if t.run_end.is_none() { " (unfinished run)" } else { "" }
    );
    o.push_str(r#"<div class="legend">"#);
    for p in [Phase::GroupWait, Phase::SlotWait, Phase::Generation, Phase::Tool, Phase::Retry, Phase::Aborted] {
        let _ = write!(o, r#"<span><i class="{}"></i>{}</span>"#, p.class(), esc(p.label()));
    }
    o.push_str("</div>");

    // Where the time went.
    let crit = s.critical.map(|c| &t.samples[c]);
    let _ = write!(
        o,
        "<h2>Where the wall time went: critical path through {}</h2><table><tr><th>segment</th><th>seconds</th><th>share</th></tr>",
        crit.map_or("no sample".to_string(), |c| format!("sample <b>{}</b> (finished last)", esc(&c.name())))
    );
    let mut sum = 0.0;
    for &(p, x) in &s.path {
        sum += x;
        let _ = write!(
            o,
            r#"<tr><td><i class="{}" style="display:inline-block;width:10px;height:10px;margin-right:6px"></i>{}</td><td>{x:.3}</td><td>{:.1}%</td></tr>"#,
            p.class(),
            esc(p.label()),
            pct(x, s.wall)
        );
    }
    let _ =
        write!(o, r#"<tr class="total"><td>total</td><td>{sum:.3}</td><td>{:.1}%</td></tr></table>"#, pct(sum, s.wall));
    let _ = write!(o, "<pre>{}</pre>", esc(&text(t, s, top)));

    // Request slots.
    let lanes = slot_lanes(&t.slots);
    let n_lanes = lanes.iter().copied().max().map_or(0, |m| m + 1);
    let height = AXIS + n_lanes as f64 * (LANE + GAP) + 4.0;
    let _ = write!(
        o,
        r#"<h2>Request slots ({n_lanes} lanes{}): each request from when it was sent until its answer was in</h2><svg xmlns="http://www.w3.org/2000/svg" viewBox="0 0 {width:.0} {height:.0}" width="{width:.0}" height="{height:.0}">"#,
        t.concurrency.map(|c| format!(", --concurrency {c}")).unwrap_or_default()
    );
    chart.axis(&mut o, height);
    for l in 0..n_lanes {
        let y = AXIS + l as f64 * (LANE + GAP);
        let _ = write!(o, r#"<text class="lane" x="4" y="{:.1}">slot {}</text>"#, y + LANE - 3.0, l + 1);
    }
    for (item, &l) in t.slots.iter().zip(&lanes) {
        let y = AXIS + l as f64 * (LANE + GAP);
        let name = t.samples[item.sample].name();
        for seg in &item.segs {
            chart.rect(&mut o, seg, y, LANE, item.sample, &name);
        }
    }
    o.push_str("</svg>");

    // Samples: in start order; the slowest ones when there are very many.
    let mut shown: Vec<usize> = if t.samples.len() > MAX_SAMPLE_LANES {
        let mut v: Vec<usize> = s.slowest.iter().copied().take(MAX_SAMPLE_LANES).collect();
        if let Some(c) = s.critical.filter(|c| !v.contains(c)) {
            v.push(c);
        }
        v
    } else {
        (0..t.samples.len()).collect()
    };
    shown.sort_by(|&a, &b| t.samples[a].start.total_cmp(&t.samples[b].start).then(a.cmp(&b)));
    let height = AXIS + shown.len() as f64 * (LANE + GAP) + 4.0;
    let _ = write!(
        o,
        r#"<h2>Samples ({}{}): from when the episode started until it ended</h2><svg xmlns="http://www.w3.org/2000/svg" viewBox="0 0 {width:.0} {height:.0}" width="{width:.0}" height="{height:.0}">"#,
        shown.len(),
        if shown.len() < t.samples.len() { format!(" slowest of {}", t.samples.len()) } else { String::new() }
    );
    chart.axis(&mut o, height);
    let ready = t.ready.unwrap_or(0.0);
    for (row, &i) in shown.iter().enumerate() {
        let x = &t.samples[i];
        let y = AXIS + row as f64 * (LANE + GAP);
        let is_crit = s.critical == Some(i);
        let full = x.name();
        let mut name = full.clone();
        if name.chars().count() > 26 {
            name = name.chars().take(25).collect::<String>() + "…";
        }
        let _ = write!(
            o,
            r#"<text class="lane{}" x="4" y="{:.1}">{}{}</text>"#,
            if is_crit { " crit" } else { "" },
            y + LANE - 3.0,
            esc(&name),
            if is_crit { " ◀ last" } else { "" }
        );
        if x.start > ready {
            let wait = Span {
                phase: Phase::GroupWait,
                start: ready,
                end: x.start,
                what: format!("waiting to start (its group queued), {:.3} s", x.start - ready),
            };
            chart.rect(&mut o, &wait, y + LANE * 0.3, LANE * 0.4, i, &full);
        }
        let mid = y + LANE / 2.0;
        let _ = write!(
            o,
            r#"<line class="life" x1="{:.2}" y1="{mid:.1}" x2="{:.2}" y2="{mid:.1}"><title>{}: {}, {:.3} s</title></line>"#,
            chart.x(x.start),
            chart.x(x.finish()),
            esc(&full),
            esc(&shape(x)),
            x.finish() - x.start
        );
        for span in &x.spans {
            let h = if span.phase == Phase::SlotWait { LANE * 0.6 } else { LANE };
            let yy = if span.phase == Phase::SlotWait { y + LANE * 0.2 } else { y };
            chart.rect(&mut o, span, yy, h, i, &full);
        }
    }
    o.push_str("</svg>");
    let _ = write!(o, r#"<div id="tip" hidden></div><script>{SCRIPT}</script></body></html>"#);
    o
}

#[cfg(test)]
mod tests {
    use super::*;

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

    #[test]
    fn nice_steps() {
        assert_eq!(nice_step(0.3), 0.5);
        assert_eq!(nice_step(1.0), 1.0);
        assert_eq!(nice_step(1.2), 2.0);
        assert_eq!(nice_step(37.0), 50.0);
    }
}
