//! `/metrics`: Prometheus text exposition under SGLang's metric names (its
//! `TokenizerMetricsCollector` and `SchedulerMetricsCollector`), with the
//! `model_name` label and SGLang's default histogram buckets, so a dashboard
//! built for SGLang reads an `arl-serve` as it reads SGLang.
//!
//! The schedulers record as they go (lock-free counters and histogram
//! buckets; one atomic add per generated token): a request's first token
//! (time to first token from its arrival, its prompt tokens), every later
//! token (the gap since the previous one: inter-token latency) and its end
//! (end-to-end latency, aborted or not). Gauges are read when scraped.
use std::fmt::Write as _;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// SGLang's default buckets (seconds).
const TTFT_BUCKETS: &[f64] =
    &[0.1, 0.2, 0.4, 0.6, 0.8, 1.0, 2.0, 4.0, 6.0, 8.0, 10.0, 20.0, 40.0, 60.0, 80.0, 100.0, 200.0, 400.0];
const ITL_BUCKETS: &[f64] = &[
    0.002, 0.004, 0.006, 0.008, 0.010, 0.015, 0.020, 0.025, 0.030, 0.035, 0.040, 0.060, 0.080, 0.100, 0.200, 0.400,
    0.600, 0.800, 1.000, 2.000, 4.000, 6.000, 8.000,
];
const E2E_BUCKETS: &[f64] = &[
    0.1, 0.2, 0.4, 0.6, 0.8, 1.0, 2.0, 4.0, 6.0, 8.0, 10.0, 20.0, 40.0, 60.0, 80.0, 100.0, 200.0, 400.0, 600.0, 1200.0,
    1800.0, 2400.0,
];

/// A Prometheus histogram: a count per bucket (not cumulative; summed when
/// rendered), the count beyond the last bound, and the sum in nanoseconds.
pub struct Histogram {
    bounds: &'static [f64],
    counts: Vec<AtomicU64>,
    sum_ns: AtomicU64,
}

impl Histogram {
    fn new(bounds: &'static [f64]) -> Histogram {
        Histogram { bounds, counts: (0..=bounds.len()).map(|_| AtomicU64::new(0)).collect(), sum_ns: AtomicU64::new(0) }
    }

    pub fn observe(&self, d: Duration) {
        let s = d.as_secs_f64();
        let i = self.bounds.partition_point(|&b| b < s);
        self.counts[i].fetch_add(1, Ordering::Relaxed);
        self.sum_ns.fetch_add(d.as_nanos().min(u64::MAX as u128) as u64, Ordering::Relaxed);
    }

    pub fn count(&self) -> u64 {
        self.counts.iter().map(|c| c.load(Ordering::Relaxed)).sum()
    }

    fn render(&self, out: &mut String, name: &str, help: &str, label: &str) {
        let _ = writeln!(out, "# HELP {name} {help}\n# TYPE {name} histogram");
        let mut cum = 0u64;
        for (i, b) in self.bounds.iter().enumerate() {
            cum += self.counts[i].load(Ordering::Relaxed);
            let _ = writeln!(out, "{name}_bucket{{le=\"{b:?}\",{label}}} {cum}");
        }
        cum += self.counts[self.bounds.len()].load(Ordering::Relaxed);
        let _ = writeln!(out, "{name}_bucket{{le=\"+Inf\",{label}}} {cum}");
        let _ = writeln!(out, "{name}_sum{{{label}}} {}", self.sum_ns.load(Ordering::Relaxed) as f64 / 1e9);
        let _ = writeln!(out, "{name}_count{{{label}}} {cum}");
    }
}

/// What the schedulers record, shared by every replica.
pub struct Metrics {
    pub prompt_tokens: AtomicU64,
    /// Prompt tokens served from the prefix cache.
    pub cached_tokens: AtomicU64,
    pub generation_tokens: AtomicU64,
    /// Requests (sequences) that ended, and those of them aborted.
    pub requests: AtomicU64,
    pub aborted: AtomicU64,
    pub ttft: Histogram,
    pub itl: Histogram,
    pub e2e: Histogram,
    /// Generated tokens at the previous scrape (for `gen_throughput`).
    last_scrape: Mutex<(Instant, u64)>,
}

impl Default for Metrics {
    fn default() -> Self {
        Metrics {
            prompt_tokens: AtomicU64::new(0),
            cached_tokens: AtomicU64::new(0),
            generation_tokens: AtomicU64::new(0),
            requests: AtomicU64::new(0),
            aborted: AtomicU64::new(0),
            ttft: Histogram::new(TTFT_BUCKETS),
            itl: Histogram::new(ITL_BUCKETS),
            e2e: Histogram::new(E2E_BUCKETS),
            last_scrape: Mutex::new((Instant::now(), 0)),
        }
    }
}

impl std::fmt::Debug for Metrics {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Metrics")
            .field("generation_tokens", &self.generation_tokens.load(Ordering::Relaxed))
            .field("requests", &self.requests.load(Ordering::Relaxed))
            .finish_non_exhaustive()
    }
}

/// The gauges, read from the schedulers' shared state when scraped.
pub struct Gauges {
    pub running: usize,
    pub queued: usize,
    pub used_tokens: usize,
    pub max_total_tokens: usize,
    pub weight_version: String,
}

impl Metrics {
    /// A sequence's first token, `since` its arrival.
    /// A prefill took `n` prompt tokens from the prefix cache.
    pub fn cached(&self, n: usize) {
        self.cached_tokens.fetch_add(n as u64, Ordering::Relaxed);
    }

    pub fn first_token(&self, prompt_tokens: usize, since: Duration) {
        self.prompt_tokens.fetch_add(prompt_tokens as u64, Ordering::Relaxed);
        self.generation_tokens.fetch_add(1, Ordering::Relaxed);
        self.ttft.observe(since);
    }

    /// A later token, `gap` after the previous one.
    pub fn next_token(&self, gap: Duration) {
        self.generation_tokens.fetch_add(1, Ordering::Relaxed);
        self.itl.observe(gap);
    }

    /// A sequence ended, `since` its arrival.
    pub fn finished(&self, since: Duration, aborted: bool) {
        self.requests.fetch_add(1, Ordering::Relaxed);
        if aborted {
            self.aborted.fetch_add(1, Ordering::Relaxed);
        }
        self.e2e.observe(since);
    }

    /// The exposition text (Prometheus 0.0.4).
    pub fn render(&self, model_name: &str, g: &Gauges) -> String {
        let label = format!("model_name=\"{}\"", escape(model_name));
        let mut out = String::with_capacity(8192);
        let counter = |out: &mut String, name: &str, help: &str, v: u64| {
            let _ = writeln!(out, "# HELP {name} {help}\n# TYPE {name} counter\n{name}{{{label}}} {v}");
        };
        let gauge = |out: &mut String, name: &str, help: &str, v: f64| {
            let _ = writeln!(out, "# HELP {name} {help}\n# TYPE {name} gauge\n{name}{{{label}}} {v}");
        };
        let gen = self.generation_tokens.load(Ordering::Relaxed);
        counter(
            &mut out,
            "sglang:prompt_tokens_total",
            "Number of prefill tokens processed.",
            self.prompt_tokens.load(Ordering::Relaxed),
        );
        counter(&mut out, "sglang:generation_tokens_total", "Number of generation tokens processed.", gen);
        counter(
            &mut out,
            "sglang:num_requests_total",
            "Number of requests processed.",
            self.requests.load(Ordering::Relaxed),
        );
        counter(
            &mut out,
            "sglang:num_aborted_requests_total",
            "Number of requests aborted.",
            self.aborted.load(Ordering::Relaxed),
        );
        counter(
            &mut out,
            "sglang:cached_tokens_total",
            "Number of cached prompt tokens.",
            self.cached_tokens.load(Ordering::Relaxed),
        );
        gauge(&mut out, "sglang:num_running_reqs", "The number of running requests.", g.running as f64);
        gauge(&mut out, "sglang:num_queue_reqs", "The number of requests in the waiting queue.", g.queued as f64);
        gauge(&mut out, "sglang:num_used_tokens", "The number of used tokens.", g.used_tokens as f64);
        let usage = if g.max_total_tokens > 0 { g.used_tokens as f64 / g.max_total_tokens as f64 } else { 0.0 };
        gauge(&mut out, "sglang:token_usage", "The token usage.", usage);
        gauge(
            &mut out,
            "sglang:max_total_num_tokens",
            "Maximum total number of tokens in the KV cache pool (arl-serve: max running requests x context length).",
            g.max_total_tokens as f64,
        );
        let throughput = {
            let mut last = self.last_scrape.lock().unwrap_or_else(|e| e.into_inner());
            let now = Instant::now();
            let dt = now.duration_since(last.0).as_secs_f64();
            let v = if dt > 0.0 { gen.saturating_sub(last.1) as f64 / dt } else { 0.0 };
            *last = (now, gen);
            v
        };
        gauge(
            &mut out,
            "sglang:gen_throughput",
            "The generation throughput (token/s), since the previous scrape.",
            throughput,
        );
        let (prompt, cached) = (self.prompt_tokens.load(Ordering::Relaxed), self.cached_tokens.load(Ordering::Relaxed));
        let rate = if prompt > 0 { cached as f64 / prompt as f64 } else { 0.0 };
        gauge(&mut out, "sglang:cache_hit_rate", "The prefix cache hit rate (cached / prompt tokens).", rate);
        self.ttft.render(
            &mut out,
            "sglang:time_to_first_token_seconds",
            "Histogram of time to first token in seconds.",
            &label,
        );
        self.itl.render(
            &mut out,
            "sglang:inter_token_latency_seconds",
            "Histogram of inter-token latency in seconds.",
            &label,
        );
        self.e2e.render(
            &mut out,
            "sglang:e2e_request_latency_seconds",
            "Histogram of End-to-end request latency in seconds",
            &label,
        );
        let _ = writeln!(
            out,
            "# HELP arl:weight_version The weight version served (its value in the label).\n# TYPE arl:weight_version gauge\narl:weight_version{{{label},version=\"{}\"}} 1",
            escape(&g.weight_version)
        );
        out
    }
}

/// A Prometheus label value: backslash, double quote and newline escaped.
fn escape(s: &str) -> String {
    s.replace('\\', "\\\\").replace('"', "\\\"").replace('\n', "\\n")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn histogram_buckets_are_cumulative_and_bounds_inclusive() {
        let m = Metrics::default();
        m.first_token(3, Duration::from_millis(100));
        m.first_token(4, Duration::from_millis(150));
        m.first_token(5, Duration::from_secs(500));
        let g = Gauges { running: 1, queued: 2, used_tokens: 10, max_total_tokens: 40, weight_version: "7".into() };
        let t = m.render("a\"b", &g);
        assert!(t.contains(r#"sglang:time_to_first_token_seconds_bucket{le="0.1",model_name="a\"b"} 1"#), "{t}");
        assert!(t.contains(r#"sglang:time_to_first_token_seconds_bucket{le="0.2",model_name="a\"b"} 2"#));
        assert!(t.contains(r#"sglang:time_to_first_token_seconds_bucket{le="400.0",model_name="a\"b"} 2"#));
        assert!(t.contains(r#"sglang:time_to_first_token_seconds_bucket{le="+Inf",model_name="a\"b"} 3"#));
        assert!(t.contains(r#"sglang:time_to_first_token_seconds_count{model_name="a\"b"} 3"#));
        assert!(t.contains(r#"sglang:time_to_first_token_seconds_sum{model_name="a\"b"} 500.25"#));
        assert!(t.contains(r#"sglang:prompt_tokens_total{model_name="a\"b"} 12"#));
        assert!(t.contains(r#"sglang:token_usage{model_name="a\"b"} 0.25"#));
        assert!(t.contains(r#"arl:weight_version{model_name="a\"b",version="7"} 1"#));
    }
}
