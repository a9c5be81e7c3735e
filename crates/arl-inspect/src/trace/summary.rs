//! Where the wall time went: the phases a moment of a run can be in, each
//! sample's time split by phase, and the critical path (the sample that
//! finished last, with what came before and after it) as segments that
//! partition the wall time; the summary as text and as JSON.
use super::parse::{Sample, Trace};
use serde_json::{json, Map, Value};
use std::collections::HashMap;
use std::fmt::Write as _;

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

impl Sample {
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

impl Trace {
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

pub(super) fn pct(x: f64, wall: f64) -> f64 {
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

pub(super) fn shape(s: &Sample) -> String {
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
