//! `arl-rollout --trace FILE`: a timeline of the run, for finding where its
//! wall time went (`arl-inspect trace FILE` draws it and sums it up). The
//! format, its events and their fields, is [`arl_core::trace`]; this writes
//! its [`TraceEvent`]s.
//!
//! The events go to `FILE.partial` as the run goes (flushed when a sample
//! ends), which is renamed to FILE when the run ends, also when it fails.
//! Without `--trace` nothing here runs: the client and the episodes check
//! an `Option` and read no clock.
use anyhow::{Context, Result};
pub use arl_core::trace::{Outcome, TraceEvent, VERSION};
use std::fs::File;
use std::io::{BufWriter, Write};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;
use std::time::{Instant, SystemTime, UNIX_EPOCH};

/// Writes the events of one run.
pub struct Tracer {
    t0: Instant,
    out: Mutex<Sink>,
    next_sample: AtomicU64,
    dest: PathBuf,
    partial: PathBuf,
}

struct Sink {
    w: BufWriter<File>,
    /// The first write error; reported when the trace is finished.
    err: Option<std::io::Error>,
}

/// What the `run` line says about the run.
pub struct RunInfo<'a> {
    pub concurrency: usize,
    pub endpoints: &'a [String],
    pub n_samples_per_prompt: u32,
}

impl Tracer {
    /// Starts the clock and creates `dest.partial`.
    pub fn create(dest: &Path, info: &RunInfo) -> Result<Tracer> {
        let t0 = Instant::now();
        let start_unix = SystemTime::now().duration_since(UNIX_EPOCH).map_or(0.0, |d| d.as_secs_f64());
        let partial = crate::output::partial_path(dest);
        let f = File::create(&partial).with_context(|| format!("`--trace`: cannot create `{}`", partial.display()))?;
        let t = Tracer {
            t0,
            out: Mutex::new(Sink { w: BufWriter::with_capacity(1 << 16, f), err: None }),
            next_sample: AtomicU64::new(0),
            dest: dest.to_path_buf(),
            partial,
        };
        t.emit(&TraceEvent::Run {
            version: VERSION,
            start_unix: Some(start_unix),
            start: Some(rfc3339(start_unix)),
            concurrency: Some(info.concurrency as u64),
            endpoints: Some(info.endpoints.to_vec()),
            n_samples_per_prompt: Some(info.n_samples_per_prompt.into()),
            streaming: Some(false),
        });
        Ok(t)
    }

    /// Seconds since the run started.
    pub fn now(&self) -> f64 {
        self.t0.elapsed().as_secs_f64()
    }

    fn emit(&self, ev: &TraceEvent) {
        self.emit_flush(ev, false);
    }

    fn emit_flush(&self, ev: &TraceEvent, flush: bool) {
        let mut line = serde_json::to_vec(ev).expect("a trace event serialises");
        line.push(b'\n');
        let mut s = self.out.lock().unwrap_or_else(|p| p.into_inner());
        if s.err.is_none() {
            let r = s.w.write_all(&line).and_then(|()| if flush { s.w.flush() } else { Ok(()) });
            if let Err(e) = r {
                s.err = Some(e);
            }
        }
    }

    /// The prompts are read and rendered: the groups start.
    pub fn ready(&self, groups: usize, samples: u64) {
        self.emit_flush(
            &TraceEvent::Ready { t: self.now(), groups: Some(groups as u64), samples: Some(samples) },
            true,
        );
    }

    /// An episode starts.
    pub fn sample(&self, prompt_id: &str, sample_index: u32) -> SampleTrace<'_> {
        let id = self.next_sample.fetch_add(1, Ordering::Relaxed);
        self.emit(&TraceEvent::SampleStart {
            t: self.now(),
            sample: id,
            prompt_id: prompt_id.to_string(),
            sample_index: sample_index.into(),
        });
        SampleTrace { tracer: self, id }
    }

    /// Writes the `run_end` line and renames `FILE.partial` to FILE.
    pub fn finish(&self, ok: bool) -> Result<()> {
        self.emit(&TraceEvent::RunEnd { t: self.now(), outcome: Some(if ok { "ok" } else { "failed" }.to_string()) });
        let mut s = self.out.lock().unwrap_or_else(|p| p.into_inner());
        let ctx = || format!("`--trace`: cannot write `{}`", self.partial.display());
        if let Some(e) = s.err.take() {
            return Err(anyhow::Error::new(e).context(ctx()));
        }
        s.w.flush().with_context(ctx)?;
        s.w.get_ref().sync_all().with_context(ctx)?;
        std::fs::rename(&self.partial, &self.dest).with_context(|| {
            format!("`--trace`: cannot rename `{}` to `{}`", self.partial.display(), self.dest.display())
        })
    }
}

/// The trace of one sample (episode).
#[derive(Clone, Copy)]
pub struct SampleTrace<'a> {
    pub tracer: &'a Tracer,
    pub id: u64,
}

/// A `/generate` call of a sample's turn (what [`crate::client::Client::generate`] notes).
#[derive(Clone, Copy)]
pub struct TurnTrace<'a> {
    pub sample: SampleTrace<'a>,
    pub turn: u32,
}

/// One `/generate` attempt, as the client saw it.
pub struct Attempt<'a> {
    pub attempt: u32,
    pub endpoint: usize,
    pub queued: f64,
    pub sent: Option<f64>,
    pub outcome: Outcome,
    pub finish: Option<&'a str>,
    pub prompt_tokens: usize,
    pub output_tokens: usize,
    pub error: Option<String>,
}

impl<'a> SampleTrace<'a> {
    pub fn turn(self, turn: u32) -> TurnTrace<'a> {
        TurnTrace { sample: self, turn }
    }

    /// A tool call of turn `turn` ran from `start` until now.
    pub fn tool(&self, turn: u32, name: &str, start: f64, error: bool) {
        let t = self.tracer;
        t.emit(&TraceEvent::Tool {
            sample: self.id,
            turn: turn.into(),
            name: name.to_string(),
            start,
            end: t.now(),
            error: Some(error),
        });
    }

    /// The episode ended: `status` is the record's, or `cancelled`/`failed`.
    pub fn end(&self, status: &str, turns: u32, tool_calls: u32) {
        let t = self.tracer;
        t.emit_flush(
            &TraceEvent::SampleEnd {
                t: t.now(),
                sample: self.id,
                status: Some(status.to_string()),
                turns: Some(turns.into()),
                tool_calls: Some(tool_calls.into()),
            },
            true,
        );
    }
}

impl TurnTrace<'_> {
    pub fn now(&self) -> f64 {
        self.sample.tracer.now()
    }

    /// A `/generate` attempt ended now.
    pub fn request(&self, a: Attempt<'_>) {
        let t = self.sample.tracer;
        t.emit(&TraceEvent::Request {
            sample: self.sample.id,
            turn: self.turn.into(),
            attempt: a.attempt.into(),
            endpoint: Some(a.endpoint as u64),
            queued: a.queued,
            sent: a.sent,
            answered: t.now(),
            outcome: a.outcome,
            finish: a.finish.map(str::to_string),
            prompt_tokens: Some(a.prompt_tokens as u64),
            output_tokens: Some(a.output_tokens as u64),
            error: a.error,
        });
    }

    /// The wait before retry `attempt` ran from `start` until now.
    pub fn backoff(&self, attempt: u32, start: f64) {
        let t = self.sample.tracer;
        t.emit(&TraceEvent::Backoff {
            sample: self.sample.id,
            turn: self.turn.into(),
            attempt: attempt.into(),
            start,
            end: t.now(),
        });
    }
}

/// `secs` since the epoch as RFC 3339 in UTC, to the microsecond.
pub fn rfc3339(secs: f64) -> String {
    let whole = secs.floor() as i64;
    let micros = ((secs - whole as f64) * 1e6).round().min(999_999.0) as i64;
    let (days, rem) = (whole.div_euclid(86_400), whole.rem_euclid(86_400));
    // Days to a civil date (Howard Hinnant's algorithm, proleptic Gregorian).
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + i64::from(month <= 2);
    format!("{year:04}-{month:02}-{day:02}T{:02}:{:02}:{:02}.{micros:06}Z", rem / 3600, rem % 3600 / 60, rem % 60)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::Value;

    #[test]
    fn rfc3339_dates() {
        assert_eq!(rfc3339(0.0), "1970-01-01T00:00:00.000000Z");
        assert_eq!(rfc3339(951_782_400.5), "2000-02-29T00:00:00.500000Z");
        assert_eq!(rfc3339(1_798_761_599.25), "2026-12-31T23:59:59.250000Z");
    }

    #[test]
    fn events_are_lines_and_the_file_appears_at_the_end() {
        let d = tempfile::tempdir().unwrap();
        let dest = d.path().join("t.jsonl");
        let eps = vec!["http://x".to_string()];
        let t = Tracer::create(&dest, &RunInfo { concurrency: 2, endpoints: &eps, n_samples_per_prompt: 1 }).unwrap();
        t.ready(1, 1);
        let s = t.sample("p0", 0);
        let turn = s.turn(1);
        let q = turn.now();
        turn.request(Attempt {
            attempt: 0,
            endpoint: 0,
            queued: q,
            sent: Some(turn.now()),
            outcome: Outcome::Ok,
            finish: Some("stop"),
            prompt_tokens: 3,
            output_tokens: 4,
            error: None,
        });
        s.tool(1, "calculator", turn.now(), false);
        s.end("completed", 1, 1);
        assert!(!dest.exists());
        t.finish(true).unwrap();
        let text = std::fs::read_to_string(&dest).unwrap();
        let types: Vec<String> = text
            .lines()
            .map(|l| serde_json::from_str::<Value>(l).unwrap()["type"].as_str().unwrap().to_string())
            .collect();
        assert_eq!(types, ["run", "ready", "sample_start", "request", "tool", "sample_end", "run_end"]);
        assert!(!crate::output::partial_path(&dest).exists());
    }
}
