//! Reading a trace: each line's event (a [`TraceEvent`], its fields checked
//! by `arl_core::trace`), checked against the lines before it and put
//! together into samples, their timed spans and the request slots' items.
//! Errors name the file, the line and the field.
use super::summary::Phase;
use anyhow::{Context, Result};
use arl_core::cli;
use arl_core::trace::{self as format, Outcome, TraceEvent, VERSION};
use serde_json::{Map, Value};
use std::collections::HashMap;
use std::io::Read;
use std::path::Path;

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
}

/// A request's hold on a `--concurrency` slot: the attempt on the wire and,
/// when it failed, the wait before its retry (the slot is held through it).
#[derive(Debug, Clone)]
pub struct SlotItem {
    pub sample: usize,
    pub segs: Vec<Span>,
}

impl SlotItem {
    pub(super) fn start(&self) -> f64 {
        self.segs.first().map_or(0.0, |s| s.start)
    }
    pub(super) fn end(&self) -> f64 {
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

const WRITTEN_BY: &str = "traces are written by `arl-rollout --trace FILE`";

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
    pub fn parse(text: &str, src: &str) -> Result<Trace> {
        let mut r = Reader {
            t: Trace { source: src.to_string(), ..Default::default() },
            by_id: HashMap::new(),
            attempts: HashMap::new(),
            seen_run: false,
        };
        for (i, raw) in text.lines().enumerate() {
            if !raw.trim().is_empty() {
                r.line(raw, At { src, n: i + 1 })?;
            }
        }
        if !r.seen_run {
            return Err(cli::hint(cli::data(format!("`{src}`: empty: no trace events")), WRITTEN_BY));
        }
        Ok(r.t)
    }
}

/// Where a line is, for its errors.
#[derive(Clone, Copy)]
struct At<'a> {
    src: &'a str,
    n: usize,
}

impl At<'_> {
    fn err(self, msg: impl std::fmt::Display) -> anyhow::Error {
        cli::data(format!("`{}:{}`: {msg}", self.src, self.n))
    }
}

/// The trace read so far.
struct Reader {
    t: Trace,
    /// Samples by their number in the trace.
    by_id: HashMap<u64, usize>,
    /// (sample, turn, attempt) of each request's slot item.
    attempts: HashMap<(usize, u64, u64), usize>,
    seen_run: bool,
}

impl Reader {
    /// One line: its event, in its place in the trace.
    fn line(&mut self, raw: &str, at: At) -> Result<()> {
        let v: Value = serde_json::from_str(raw).map_err(|e| at.err(format_args!("not JSON: {e}")))?;
        let Some(obj) = v.as_object() else {
            return Err(at.err("expected a JSON object (one trace event)"));
        };
        let ty = format::event_type(obj).map_err(|e| at.err(e))?;
        self.in_order(ty, obj, at)?;
        let ev = TraceEvent::from_object(obj).map_err(|e| at.err(e))?;
        self.event(ev).map_err(|e| at.err(e))
    }

    /// The trace's order: one `run` line, the first, in a format version
    /// this reads.
    fn in_order(&mut self, ty: &str, obj: &Map<String, Value>, at: At) -> Result<()> {
        if !self.seen_run && ty != "run" {
            return Err(cli::hint(at.err("not a rollout trace: the first event is not `run`"), WRITTEN_BY));
        }
        if ty == "run" {
            if self.seen_run {
                return Err(at.err("a second `run` event: one trace holds one run"));
            }
            self.seen_run = true;
            // Before the other fields: a newer format may have changed them.
            if let Some(version) = obj.get("version").and_then(Value::as_u64).filter(|&v| v > VERSION) {
                return Err(at.err(format_args!(
                    "field `version`: trace format {version}; this arl-inspect reads up to {VERSION}"
                )));
            }
        }
        Ok(())
    }

    /// A line's event, added to the trace read so far.
    fn event(&mut self, ev: TraceEvent) -> Result<(), String> {
        match ev {
            TraceEvent::Run { start, concurrency, .. } => {
                self.t.start = start;
                self.t.concurrency = concurrency;
            }
            TraceEvent::Ready { t, groups, .. } => {
                self.t.ready = Some(t);
                self.t.groups = groups;
            }
            TraceEvent::SampleStart { t, sample, prompt_id, sample_index } => {
                self.sample_start(t, sample, prompt_id, sample_index)?
            }
            TraceEvent::Request {
                sample,
                turn,
                attempt,
                queued,
                sent,
                answered,
                outcome,
                finish,
                output_tokens,
                error,
                ..
            } => {
                let s = self.sample_of(sample)?;
                let wire = (queued, sent, answered);
                let tail = finish.map(|f| format!(", finish {f}")).unwrap_or_default()
                    + &error.map(|e| format!(" ({e})")).unwrap_or_default();
                self.request(s, turn, attempt, wire, outcome, output_tokens.unwrap_or(0), &tail);
            }
            TraceEvent::Backoff { sample, turn, attempt, start, end } => {
                let s = self.sample_of(sample)?;
                self.backoff(s, turn, attempt, start, end);
            }
            TraceEvent::Tool { sample, turn, name, start, end, error } => {
                let s = self.sample_of(sample)?;
                let what = format!(
                    "turn {turn}: tool `{name}`, {:.3} s{}",
                    end - start,
                    if error.unwrap_or(false) { " (error)" } else { "" }
                );
                self.t.samples[s].spans.push(Span { phase: Phase::Tool, start, end, what });
                self.t.last = self.t.last.max(end);
            }
            TraceEvent::SampleEnd { t, sample, status, turns, tool_calls } => {
                let s = self.sample_of(sample)?;
                let x = &mut self.t.samples[s];
                if t + 1e-9 < x.start {
                    return Err(format!("field `t` ({t}) is before `sample_start t` ({})", x.start));
                }
                x.end = Some(t);
                x.status = status;
                x.turns = turns.unwrap_or(0);
                x.tool_calls = tool_calls.unwrap_or(0);
                self.t.last = self.t.last.max(t);
            }
            TraceEvent::RunEnd { t, outcome } => {
                self.t.run_end = Some(t);
                self.t.outcome = outcome;
            }
        }
        Ok(())
    }

    /// The index of sample `id`, started on an earlier line.
    fn sample_of(&self, id: u64) -> Result<usize, String> {
        self.by_id.get(&id).copied().ok_or_else(|| format!("sample {id} has no `sample_start` line before"))
    }

    fn sample_start(&mut self, t: f64, id: u64, prompt_id: String, sample_index: u64) -> Result<(), String> {
        if self.by_id.contains_key(&id) {
            return Err(format!("field `sample`: sample {id} starts twice"));
        }
        self.by_id.insert(id, self.t.samples.len());
        self.t.samples.push(Sample {
            id,
            prompt_id,
            sample_index,
            start: t,
            end: None,
            status: None,
            turns: 0,
            tool_calls: 0,
            spans: Vec::new(),
        });
        Ok(())
    }

    /// A `/generate` attempt: its wait for a slot and, when it was sent, its
    /// time on the wire (also the start of a slot item). `tail`: its finish
    /// reason and error, for the tooltip.
    fn request(
        &mut self,
        s: usize,
        turn: u64,
        attempt: u64,
        (queued, sent, answered): (f64, Option<f64>, f64),
        outcome: Outcome,
        out_tokens: u64,
        tail: &str,
    ) {
        let phase = match outcome {
            Outcome::Ok => Phase::Generation,
            Outcome::Aborted | Outcome::Cancelled => Phase::Aborted,
            Outcome::Retry | Outcome::Error => Phase::Retry,
        };
        let head = format!("turn {turn}, attempt {attempt}");
        let sample = &mut self.t.samples[s];
        let wait_end = sent.unwrap_or(answered);
        sample.spans.push(Span {
            phase: Phase::SlotWait,
            start: queued,
            end: wait_end,
            what: format!("{head}: waiting for a slot, {:.3} s", wait_end - queued),
        });
        if let Some(sent) = sent {
            let what = format!("{head}: {}, {:.3} s, {out_tokens} tokens{tail}", outcome.as_str(), answered - sent);
            let span = Span { phase, start: sent, end: answered, what };
            sample.spans.push(span.clone());
            self.attempts.insert((s, turn, attempt), self.t.slots.len());
            self.t.slots.push(SlotItem { sample: s, segs: vec![span] });
        }
        self.t.last = self.t.last.max(answered);
    }

    /// The wait before retry `attempt`.
    fn backoff(&mut self, s: usize, turn: u64, attempt: u64, start: f64, end: f64) {
        let span = Span {
            phase: Phase::Retry,
            start,
            end,
            what: format!("turn {turn}: waiting {:.3} s before retry {attempt}", end - start),
        };
        self.t.samples[s].spans.push(span.clone());
        // The slot is held through the wait after the failed attempt.
        if let Some(&k) = attempt.checked_sub(1).and_then(|a| self.attempts.get(&(s, turn, a))) {
            self.t.slots[k].segs.push(span);
        }
        self.t.last = self.t.last.max(end);
    }
}
