//! The rollout trace, `arl-rollout --trace FILE`: a timeline of the run, for
//! finding where its wall time went (`arl-inspect trace FILE` draws it and
//! sums it up). [`TraceEvent`] is its one definition: the writer serialises
//! it, the reader parses it; [`VERSION`] is the format's version.
//!
//! FILE is JSONL, one event a line, each written when what it describes has
//! ended; times are seconds from the start of the run (`t`, or `start`/`end`,
//! `queued`/`sent`/`answered`), the run's absolute start is in the first line.
//!
//! | `type` | fields | written |
//! |---|---|---|
//! | `run` | `version` (1), `start_unix` (seconds since the epoch), `start` (RFC 3339, UTC), `concurrency`, `endpoints`, `n_samples_per_prompt`, `streaming` (false: requests are not streamed) | first |
//! | `ready` | `t`, `groups`, `samples` | prompts read and rendered; the groups start |
//! | `sample_start` | `t`, `sample` (the sample's number in this trace), `prompt_id`, `sample_index` | an episode starts |
//! | `request` | `sample`, `turn`, `attempt` (0, then one per retry), `endpoint`, `queued` (waiting for a `--concurrency` slot), `sent` (slot taken, request on its way; null when the run stopped first), `answered` (the whole answer is in: requests are not streamed, so this is the whole response time, not the time to the first token), `outcome` (`ok`, `aborted`: the server answered `abort`, `retry`: failed and retried, `error`: failed for good, `cancelled`: the run stopped), `finish`, `prompt_tokens`, `output_tokens`, `error` | a `/generate` attempt ends |
//! | `backoff` | `sample`, `turn`, `attempt`, `start`, `end` | the wait before a retry |
//! | `tool` | `sample`, `turn`, `name`, `start`, `end`, `error` | a tool call returns |
//! | `sample_end` | `t`, `sample`, `status` (the record's, or `cancelled`/`failed`), `turns`, `tool_calls` | the episode ends |
//! | `run_end` | `t` (the run's wall time), `outcome` (`ok` or `failed`) | last |
//!
//! The writer writes every field: `sent` and `finish` are null when there is
//! none, `error` is left out when there is none. A reader needs fewer (the
//! fields of type `Option` here it takes as absent when missing or null);
//! what it finds it checks, naming the field that is wrong: times are
//! numbers of seconds (≥ 0), counts integers ≥ 0, and within a line `sent`
//! is not before `queued`, `answered` not before `sent` (or `queued`), `end`
//! not before `start`.
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

/// The trace format's version (the `run` line's `version`).
pub const VERSION: u64 = 1;

/// One line of a trace. Serialised, the variant is the `type` field and the
/// fields follow in the order declared here.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case", try_from = "Map<String, Value>")]
pub enum TraceEvent {
    /// First: the run.
    Run {
        version: u64,
        start_unix: Option<f64>,
        start: Option<String>,
        concurrency: Option<u64>,
        endpoints: Option<Vec<String>>,
        n_samples_per_prompt: Option<u64>,
        streaming: Option<bool>,
    },
    /// The prompts are read and rendered: the groups start.
    Ready { t: f64, groups: Option<u64>, samples: Option<u64> },
    /// An episode starts.
    SampleStart { t: f64, sample: u64, prompt_id: String, sample_index: u64 },
    /// A `/generate` attempt ended (at `answered`).
    Request {
        sample: u64,
        turn: u64,
        attempt: u64,
        endpoint: Option<u64>,
        queued: f64,
        /// Null when the run stopped before the request was sent.
        sent: Option<f64>,
        answered: f64,
        outcome: Outcome,
        /// Null when there is none.
        finish: Option<String>,
        prompt_tokens: Option<u64>,
        output_tokens: Option<u64>,
        /// Left out when there is none.
        #[serde(skip_serializing_if = "Option::is_none")]
        error: Option<String>,
    },
    /// The wait before retry `attempt`.
    Backoff { sample: u64, turn: u64, attempt: u64, start: f64, end: f64 },
    /// A tool call of turn `turn`.
    Tool { sample: u64, turn: u64, name: String, start: f64, end: f64, error: Option<bool> },
    /// The episode ended.
    SampleEnd { t: f64, sample: u64, status: Option<String>, turns: Option<u64>, tool_calls: Option<u64> },
    /// Last: the run's wall time and how it ended (`ok` or `failed`).
    RunEnd { t: f64, outcome: Option<String> },
}

/// How a `/generate` attempt ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Outcome {
    Ok,
    Aborted,
    Retry,
    Error,
    Cancelled,
}

impl Outcome {
    pub fn as_str(self) -> &'static str {
        match self {
            Outcome::Ok => "ok",
            Outcome::Aborted => "aborted",
            Outcome::Retry => "retry",
            Outcome::Error => "error",
            Outcome::Cancelled => "cancelled",
        }
    }

    fn parse(s: &str) -> Option<Outcome> {
        [Outcome::Ok, Outcome::Aborted, Outcome::Retry, Outcome::Error, Outcome::Cancelled]
            .into_iter()
            .find(|o| o.as_str() == s)
    }
}

/// Why a line is not a trace event; it names the field
/// (`` field `sent`: expected a number of seconds (≥ 0) ``).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EventError(pub String);

impl std::fmt::Display for EventError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for EventError {}

/// An event's `type`.
pub fn event_type(obj: &Map<String, Value>) -> Result<&str, EventError> {
    Fields(obj).string("type")
}

impl TraceEvent {
    /// Reads one event from its JSON object, checking each field it reads.
    pub fn from_object(obj: &Map<String, Value>) -> Result<TraceEvent, EventError> {
        let f = Fields(obj);
        let ev = match event_type(obj)? {
            "run" => TraceEvent::Run {
                version: f.uint("version")?,
                start_unix: f.opt_secs("start_unix")?,
                start: f.opt_string("start")?,
                concurrency: f.opt_uint("concurrency")?,
                endpoints: f.opt_strings("endpoints")?,
                n_samples_per_prompt: f.opt_uint("n_samples_per_prompt")?,
                streaming: f.opt_bool("streaming")?,
            },
            "ready" => {
                TraceEvent::Ready { t: f.secs("t")?, groups: f.opt_uint("groups")?, samples: f.opt_uint("samples")? }
            }
            "sample_start" => TraceEvent::SampleStart {
                t: f.secs("t")?,
                sample: f.uint("sample")?,
                prompt_id: f.string("prompt_id")?.to_string(),
                sample_index: f.uint("sample_index")?,
            },
            "request" => f.request()?,
            "backoff" => {
                let (start, end) = f.span()?;
                TraceEvent::Backoff {
                    sample: f.uint("sample")?,
                    turn: f.uint("turn")?,
                    attempt: f.uint("attempt")?,
                    start,
                    end,
                }
            }
            "tool" => {
                let (start, end) = f.span()?;
                TraceEvent::Tool {
                    sample: f.uint("sample")?,
                    turn: f.uint("turn")?,
                    name: f.string("name")?.to_string(),
                    start,
                    end,
                    error: f.opt_bool("error")?,
                }
            }
            "sample_end" => TraceEvent::SampleEnd {
                t: f.secs("t")?,
                sample: f.uint("sample")?,
                status: f.opt_string("status")?,
                turns: f.opt_uint("turns")?,
                tool_calls: f.opt_uint("tool_calls")?,
            },
            "run_end" => TraceEvent::RunEnd { t: f.secs("t")?, outcome: f.opt_string("outcome")? },
            other => return Err(EventError(format!("field `type`: unknown event `{other}`"))),
        };
        Ok(ev)
    }
}

impl TryFrom<Map<String, Value>> for TraceEvent {
    type Error = EventError;
    fn try_from(obj: Map<String, Value>) -> Result<TraceEvent, EventError> {
        TraceEvent::from_object(&obj)
    }
}

/// One line's fields, read with errors that name the field.
struct Fields<'a>(&'a Map<String, Value>);

fn bad(f: &str, what: &str) -> EventError {
    EventError(format!("field `{f}`: expected {what}"))
}

impl<'a> Fields<'a> {
    /// The field, `None` when it is missing or null.
    fn get(&self, f: &str) -> Option<&'a Value> {
        self.0.get(f).filter(|v| !v.is_null())
    }
    fn secs(&self, f: &str) -> Result<f64, EventError> {
        match self.0.get(f).and_then(Value::as_f64) {
            Some(x) if x.is_finite() && x >= 0.0 => Ok(x),
            _ => Err(bad(f, "a number of seconds (≥ 0)")),
        }
    }
    fn opt_secs(&self, f: &str) -> Result<Option<f64>, EventError> {
        self.get(f).map(|_| self.secs(f)).transpose()
    }
    fn uint(&self, f: &str) -> Result<u64, EventError> {
        self.0.get(f).and_then(Value::as_u64).ok_or_else(|| bad(f, "an integer ≥ 0"))
    }
    fn opt_uint(&self, f: &str) -> Result<Option<u64>, EventError> {
        self.get(f).map(|_| self.uint(f)).transpose()
    }
    fn string(&self, f: &str) -> Result<&'a str, EventError> {
        self.0.get(f).and_then(Value::as_str).ok_or_else(|| bad(f, "a string"))
    }
    fn opt_string(&self, f: &str) -> Result<Option<String>, EventError> {
        self.get(f).map(|_| self.string(f).map(str::to_string)).transpose()
    }
    fn opt_bool(&self, f: &str) -> Result<Option<bool>, EventError> {
        self.get(f).map(|v| v.as_bool().ok_or_else(|| bad(f, "true or false"))).transpose()
    }
    fn opt_strings(&self, f: &str) -> Result<Option<Vec<String>>, EventError> {
        let strings = |v: &Value| -> Option<Vec<String>> {
            v.as_array()?.iter().map(|s| s.as_str().map(str::to_string)).collect()
        };
        self.get(f).map(|v| strings(v).ok_or_else(|| bad(f, "an array of strings"))).transpose()
    }
    /// `b` is not before `a`.
    fn ordered(a: (&str, f64), b: (&str, f64)) -> Result<(), EventError> {
        if b.1 + 1e-9 < a.1 {
            return Err(EventError(format!("field `{}` ({}) is before `{}` ({})", b.0, b.1, a.0, a.1)));
        }
        Ok(())
    }
    /// `start` and `end`, in order.
    fn span(&self) -> Result<(f64, f64), EventError> {
        let (start, end) = (self.secs("start")?, self.secs("end")?);
        Fields::ordered(("start", start), ("end", end))?;
        Ok((start, end))
    }
    fn request(&self) -> Result<TraceEvent, EventError> {
        let (sample, turn, attempt) = (self.uint("sample")?, self.uint("turn")?, self.uint("attempt")?);
        let endpoint = self.opt_uint("endpoint")?;
        let (queued, sent, answered) = (self.secs("queued")?, self.opt_secs("sent")?, self.secs("answered")?);
        let outcome = self.string("outcome")?;
        let outcome = Outcome::parse(outcome).ok_or_else(|| {
            EventError(format!("field `outcome`: `{outcome}`; expected ok, aborted, retry, error or cancelled"))
        })?;
        let ev = TraceEvent::Request {
            sample,
            turn,
            attempt,
            endpoint,
            queued,
            sent,
            answered,
            outcome,
            finish: self.opt_string("finish")?,
            prompt_tokens: self.opt_uint("prompt_tokens")?,
            output_tokens: self.opt_uint("output_tokens")?,
            error: self.opt_string("error")?,
        };
        match sent {
            Some(sent) => {
                Fields::ordered(("queued", queued), ("sent", sent))?;
                Fields::ordered(("sent", sent), ("answered", answered))?;
            }
            None => Fields::ordered(("queued", queued), ("answered", answered))?,
        }
        Ok(ev)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn every_event() -> Vec<TraceEvent> {
        vec![
            TraceEvent::Run {
                version: VERSION,
                start_unix: Some(1.5),
                start: Some("1970-01-01T00:00:01.500000Z".into()),
                concurrency: Some(2),
                endpoints: Some(vec!["http://x".into()]),
                n_samples_per_prompt: Some(1),
                streaming: Some(false),
            },
            TraceEvent::Ready { t: 0.1, groups: Some(1), samples: Some(1) },
            TraceEvent::SampleStart { t: 0.1, sample: 0, prompt_id: "p0".into(), sample_index: 0 },
            TraceEvent::Request {
                sample: 0,
                turn: 1,
                attempt: 0,
                endpoint: Some(0),
                queued: 0.1,
                sent: None,
                answered: 0.2,
                outcome: Outcome::Cancelled,
                finish: None,
                prompt_tokens: Some(3),
                output_tokens: Some(0),
                error: None,
            },
            TraceEvent::Backoff { sample: 0, turn: 1, attempt: 1, start: 0.2, end: 0.3 },
            TraceEvent::Tool {
                sample: 0,
                turn: 1,
                name: "calculator".into(),
                start: 0.3,
                end: 0.4,
                error: Some(false),
            },
            TraceEvent::SampleEnd {
                t: 0.5,
                sample: 0,
                status: Some("cancelled".into()),
                turns: Some(1),
                tool_calls: Some(1),
            },
            TraceEvent::RunEnd { t: 0.6, outcome: Some("ok".into()) },
        ]
    }

    #[test]
    fn what_is_written_reads_back() {
        for ev in every_event() {
            let line = serde_json::to_string(&ev).unwrap();
            assert_eq!(serde_json::from_str::<TraceEvent>(&line).unwrap(), ev, "{line}");
        }
    }

    #[test]
    fn the_lines_as_written() {
        let lines: Vec<String> = every_event().iter().map(|e| serde_json::to_string(e).unwrap()).collect();
        assert_eq!(
            lines[0],
            r#"{"type":"run","version":1,"start_unix":1.5,"start":"1970-01-01T00:00:01.500000Z","concurrency":2,"endpoints":["http://x"],"n_samples_per_prompt":1,"streaming":false}"#
        );
        // `sent` and `finish` null, `error` left out.
        assert_eq!(
            lines[3],
            r#"{"type":"request","sample":0,"turn":1,"attempt":0,"endpoint":0,"queued":0.1,"sent":null,"answered":0.2,"outcome":"cancelled","finish":null,"prompt_tokens":3,"output_tokens":0}"#
        );
        assert_eq!(
            lines[6],
            r#"{"type":"sample_end","t":0.5,"sample":0,"status":"cancelled","turns":1,"tool_calls":1}"#
        );
    }

    #[test]
    fn errors_name_the_field() {
        let read = |s: &str| {
            let v: Value = serde_json::from_str(s).unwrap();
            TraceEvent::from_object(v.as_object().unwrap()).map_err(|e| e.to_string())
        };
        assert_eq!(read(r#"{"t":1}"#).unwrap_err(), "field `type`: expected a string");
        assert_eq!(read(r#"{"type":"nap"}"#).unwrap_err(), "field `type`: unknown event `nap`");
        assert_eq!(read(r#"{"type":"ready","t":-1}"#).unwrap_err(), "field `t`: expected a number of seconds (≥ 0)");
        assert_eq!(
            read(r#"{"type":"backoff","sample":0,"turn":1,"attempt":1,"start":2,"end":1}"#).unwrap_err(),
            "field `end` (1) is before `start` (2)"
        );
        assert_eq!(
            read(r#"{"type":"request","sample":0,"turn":1,"attempt":0,"queued":0,"answered":1,"outcome":"fine"}"#)
                .unwrap_err(),
            "field `outcome`: `fine`; expected ok, aborted, retry, error or cancelled"
        );
        // Fields a reader does not need may be missing or null.
        assert_eq!(
            read(r#"{"type":"sample_end","t":1,"sample":0,"status":null}"#).unwrap(),
            TraceEvent::SampleEnd { t: 1.0, sample: 0, status: None, turns: None, tool_calls: None }
        );
    }
}
