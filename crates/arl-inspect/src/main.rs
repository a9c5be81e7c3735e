//! `arl-inspect`: look at trajectory files.
//!
//! * `stats`: counts, statuses, rewards (overall and per `data_source`,
//!   with pass@k / mean@k per group), response-length percentiles, token
//!   totals and group sizes, as a table or `--json`.
//! * `eval`: benchmark scores (accuracy with Wilson intervals, unbiased
//!   pass@k with bootstrap intervals) per `data_source` and slice.
//! * `show`: one record for a human: turns, tool calls and outputs, which
//!   spans are trained; with `--tokenizer` it decodes and marks each token.
//! * `convert`: JSONL ↔ Parquet.
//! * `trace`: a rollout trace (`arl-rollout --trace`) as a timeline and a
//!   summary of where the wall time went (see [`trace`]).
//!
//! Reads JSONL or Parquet (detected from content). Exit codes: see
//! [`arl_core::cli::exit`].
use anyhow::{Context, Result};
use arl_chat::tokenizer::Tokenizer;
use arl_core::args::{InputArgs, OutputArgs};
use arl_core::cli::{self, EXIT_CODES_HELP};
use arl_core::record::Record;
use arl_core::stats::Stats;
use clap::{Parser, Subcommand, ValueEnum};
use std::io::Write;
use std::path::PathBuf;
use std::process::ExitCode;

mod eval;
mod show;
mod trace;

pub const TOOL: &str = "arl-inspect";

/// Inspect trajectory files: statistics, benchmark scores, one record in detail, format conversion, rollout traces
#[derive(Debug, Parser)]
#[command(name = "arl-inspect", version, after_long_help = EXIT_CODES_HELP)]
pub struct Args {
    #[command(subcommand)]
    pub cmd: Cmd,
}

#[derive(Debug, Subcommand)]
pub enum Cmd {
    Stats(StatsArgs),
    Eval(EvalArgs),
    Show(ShowArgs),
    Convert(ConvertArgs),
    Trace(TraceArgs),
}

/// Per-stage statistics: counts, statuses, rewards, lengths, tokens, groups
///
/// Rewards are summarised overall and per `data_source`; groups (records
/// sharing a `prompt_id`) give pass@k (share of groups with at least one
/// sample scoring `--pass-threshold` or more) and mean@k (mean over groups of
/// the group's mean score), where k is the group size. The score of a sample
/// is `reward_detail.score` (the verifier's verdict before shaping: format
/// bonus, tool-call cost, overlong penalty) when present, else `reward`. Response lengths are
/// in tokens (`len(tokens) - prompt_len`), percentiles by nearest rank.
///
/// Parquet is read by the columns the summary uses (`data_source`, `status`,
/// `reward`, `reward_detail`, `tokens`, `prompt_len`, `loss_mask`, `turns`,
/// `tool_calls`, `prompt_id`, and the field a `--by` names), row group by
/// row group: memory is bounded by a row group, not the file. Other columns
/// are neither read nor checked.
#[derive(Debug, clap::Args)]
#[command(after_long_help = EXIT_CODES_HELP)]
pub struct StatsArgs {
    #[command(flatten)]
    pub input: InputArgs,
    /// Print JSON instead of a table
    #[arg(long)]
    pub json: bool,
    /// Score at or above which a sample counts as solved for pass@k
    #[arg(long, default_value_t = 1.0, value_name = "R")]
    pub pass_threshold: f64,
    /// Also break the statistics down by this field: a record field
    /// (`finish_reason`, `status`) or a path into `metadata` (`metadata.kind`,
    /// `metadata.difficulty`); repeatable
    #[arg(long, value_name = "FIELD")]
    pub by: Vec<String>,
}

/// Benchmark scores as papers report them: accuracy or pass@k, with intervals
///
/// From scored records (`arl-reward` output), per `data_source` and per
/// slice (`--by metadata.level`, `--by metadata.type`): problems (records
/// sharing a `prompt_id`), samples per problem, and with one sample each the
/// accuracy with its Wilson 95% interval; with n samples each, pass@k for
/// every `--k` (default 1 and n) by the unbiased estimator `1 − C(n−c, k) /
/// C(n, k)` (Chen et al. 2021) averaged over problems, with a bootstrap 95%
/// interval over problems (`--bootstrap` resamples, `--seed`). A sample is
/// solved when its score (`reward_detail.score`, the verdict before shaping,
/// else `reward`) is at least `--pass-threshold`. Also the mean response
/// length in tokens and the share of samples cut at the length limit
/// (`finish_reason: length`). `make eval` prints this table.
#[derive(Debug, clap::Args)]
#[command(after_long_help = EXIT_CODES_HELP)]
pub struct EvalArgs {
    #[command(flatten)]
    pub input: InputArgs,
    /// Print JSON instead of a table
    #[arg(long)]
    pub json: bool,
    /// Also report each value of this field (`metadata.level`, `metadata.type`); repeatable
    #[arg(long, value_name = "FIELD")]
    pub by: Vec<String>,
    /// pass@k for these k (comma-separated); default 1 and the samples per problem
    #[arg(long, value_delimiter = ',', value_name = "K")]
    pub k: Vec<u64>,
    /// Score at or above which a sample counts as solved
    #[arg(long, default_value_t = 1.0, value_name = "R")]
    pub pass_threshold: f64,
    /// Bootstrap resamples for pass@k's interval
    #[arg(long, default_value_t = 2000, value_name = "N")]
    pub bootstrap: u32,
    /// Seed of the bootstrap
    #[arg(long, default_value_t = 0, value_name = "S")]
    pub seed: u64,
}

/// One record for a human: prompt, turns, tool calls, trained spans, reward
///
/// Without `--tokenizer`, the response text is shown with the loss-mask spans
/// listed by token index. With `--tokenizer DIR`, each span is decoded and
/// shown trained (green, or `[+ … +]` without colour) or not trained (dim,
/// `[- … -]`); `--tokens` lists every response token with its id, mask,
/// log-prob and advantage.
///
/// A web episode (browser tool calls, `arl-rollout --web`) is also shown
/// as its actions (`→ click({"id":4})`), each followed by the page it returned.
#[derive(Debug, clap::Args)]
#[command(after_long_help = EXIT_CODES_HELP)]
pub struct ShowArgs {
    #[command(flatten)]
    pub input: InputArgs,
    /// Which record, counted from 0 over the input
    #[arg(short = 'n', long, default_value_t = 0, value_name = "N")]
    pub index: u64,
    /// Select by `prompt_id` instead (with `--sample`)
    #[arg(long, value_name = "ID")]
    pub prompt_id: Option<String>,
    /// With `--prompt-id`: the `sample_index` to show
    #[arg(long, default_value_t = 0, value_name = "K")]
    pub sample: u32,
    /// Model or tokenizer directory: decode tokens and mark each trained token
    #[arg(long, value_name = "DIR")]
    pub tokenizer: Option<PathBuf>,
    /// List every response token (needs `--tokenizer`)
    #[arg(long, requires = "tokenizer")]
    pub tokens: bool,
    /// Colour: `auto` (when stdout is a terminal and NO_COLOR is unset), `always`, `never`
    #[arg(long, value_enum, default_value_t = Color::Auto)]
    pub color: Color,
    /// Print the record as pretty JSON instead
    #[arg(long)]
    pub json: bool,
}

#[derive(Debug, Clone, Copy, ValueEnum)]
pub enum Color {
    Auto,
    Always,
    Never,
}

/// Convert between JSONL and Parquet (lossless, unknown fields included)
///
/// The output format comes from `--format`, else the output's extension,
/// else the opposite of the input's format.
#[derive(Debug, clap::Args)]
#[command(after_long_help = EXIT_CODES_HELP)]
pub struct ConvertArgs {
    #[command(flatten)]
    pub input: InputArgs,
    #[command(flatten)]
    pub output: OutputArgs,
}

/// Where a rollout's wall time went: a timeline (HTML) and a summary
///
/// Reads the trace `arl-rollout --trace FILE` wrote and prints on stdout
/// where the run's wall time went, attributed along its critical path: the
/// sample that finished last. Its segments partition the wall time (they
/// add up to it): start-up (reading and rendering the prompts), waiting to
/// start (its group queued behind others), then the sample's own time —
/// waiting for a `--concurrency` request slot, generation (a request on the
/// wire until its whole answer is in), tool calls, retries (failed attempts
/// and the backoff before the next), aborted generation, and the rollout's
/// own work between these — and after the sample ended (writing the
/// output). Then the same phases summed over every sample, how busy the
/// request slots were, the long tail (when 90% of the samples had finished
/// and which samples took the rest of the time) and the `--top` slowest
/// samples with their share of the wall time.
///
/// `-o FILE.html` also writes the timeline: one self-contained page (inline
/// SVG, CSS and a few lines of script; nothing is fetched) with the table
/// above, one lane per request slot (each request from sent to answered,
/// with the wait before a retry), and one lane per sample (the group's wait
/// to start, waiting for a slot, generation, tool calls, retries, aborts),
/// in colours per phase. Hovering a bar shows what it was; clicking marks
/// every bar of its sample. Slot lanes are assigned from the times (a
/// request takes the first lane free when it was sent).
///
/// The trace is JSONL, one event a line (`type`), times in seconds from
/// the run's start: `run` (first: `version`, `start_unix`, `start` in
/// RFC 3339, `concurrency`, `endpoints`, `n_samples_per_prompt`), `ready`
/// (`t`: the groups start; `groups`, `samples`), `sample_start` (`t`,
/// `sample`, `prompt_id`, `sample_index`), `request` (`sample`, `turn`,
/// `attempt`, `endpoint`, `queued`, `sent` (null: never sent), `answered`,
/// `outcome`: ok/aborted/retry/error/cancelled, `finish`, `prompt_tokens`,
/// `output_tokens`, `error`), `backoff` (`sample`, `turn`, `attempt`,
/// `start`, `end`), `tool` (`sample`, `turn`, `name`, `start`, `end`,
/// `error`), `sample_end` (`t`, `sample`, `status`, `turns`, `tool_calls`),
/// `run_end` (last: `t`, the wall time; `outcome`). A trace without
/// `run_end` (a killed run's `FILE.partial`) is read up to its last event.
/// A line that breaks these rules stops the tool with its file, line and
/// field (exit 65).
///
/// Example: arl-rollout … --trace step-3.trace.jsonl && arl-inspect trace step-3.trace.jsonl -o step-3.html
#[derive(Debug, clap::Args)]
#[command(after_long_help = EXIT_CODES_HELP)]
pub struct TraceArgs {
    /// The trace (`arl-rollout --trace FILE`); `-` reads stdin
    #[arg(value_name = "TRACE")]
    pub trace: PathBuf,
    /// Write the timeline as a self-contained HTML page, atomically
    #[arg(short = 'o', long = "output", value_name = "HTML")]
    pub output: Option<PathBuf>,
    /// Print the summary as JSON instead (the critical path's segments under
    /// `critical_path.phases`, in seconds)
    #[arg(long)]
    pub json: bool,
    /// How many of the slowest samples to list
    #[arg(long, default_value_t = 5, value_name = "N")]
    pub top: usize,
    /// No summary on stdout and no note on stderr (with `-o`: only the page)
    #[arg(short = 'q', long)]
    pub quiet: bool,
}

pub fn run(args: Args) -> Result<ExitCode> {
    match args.cmd {
        Cmd::Stats(a) => stats(a),
        Cmd::Eval(a) => eval_cmd(a),
        Cmd::Show(a) => show(a),
        Cmd::Convert(a) => convert(a),
        Cmd::Trace(a) => trace_cmd(a),
    }
}

fn trace_cmd(a: TraceArgs) -> Result<ExitCode> {
    let t = trace::Trace::read(&a.trace)?;
    let s = trace::summarize(&t);
    if let Some(path) = &a.output {
        let mut f = arl_core::io::AtomicFile::create(path)?;
        f.write_all(trace::html(&t, &s, a.top).as_bytes())
            .with_context(|| format!("cannot write `{}`", path.display()))?;
        f.finish()?;
        if !a.quiet {
            eprintln!("{TOOL}: timeline written to `{}`", path.display());
        }
    }
    if !a.quiet {
        let text = if a.json {
            serde_json::to_string_pretty(&trace::to_json(&t, &s, a.top))? + "\n"
        } else {
            trace::text(&t, &s, a.top)
        };
        std::io::stdout().lock().write_all(text.as_bytes())?;
    }
    Ok(ExitCode::SUCCESS)
}

fn stats(a: StatsArgs) -> Result<ExitCode> {
    // Parquet is read by the columns the summary uses (and those `--by` names).
    let mut columns = Stats::READS.to_vec();
    for f in &a.by {
        let top = f.split('.').next().unwrap_or(f);
        match arl_core::record::FIELDS.iter().find(|(n, _)| *n == top) {
            Some((n, _)) => columns.push(n),
            // Fields arl does not know travel in `_extra`.
            None => columns.push(arl_core::schema::EXTRA_COLUMN),
        }
    }
    let mut inp = cli::Input::open_projected(&a.input.spec()?, &columns)?;
    let mut st = a.by.iter().fold(Stats::new(a.pass_threshold), |st, f| st.by(f));
    let pb = cli::progress(a.input.quiet, None, "records");
    while let Some(batch) = inp.next_batch()? {
        pb.inc(batch.len() as u64);
        for (_, r) in &batch {
            st.push(r);
        }
    }
    pb.finish_and_clear();
    inp.finish(TOOL, 0)?;
    let mut out = std::io::stdout().lock();
    if a.json {
        writeln!(out, "{}", serde_json::to_string_pretty(&st.to_json())?)?;
    } else {
        write!(out, "{}", st.to_table())?;
    }
    Ok(ExitCode::SUCCESS)
}

fn eval_cmd(a: EvalArgs) -> Result<ExitCode> {
    let mut inp = cli::Input::open(&a.input.spec()?)?;
    let mut ev = eval::Eval::new(a.by.clone(), a.pass_threshold);
    while let Some(batch) = inp.next_batch()? {
        for (_, r) in &batch {
            ev.push(r);
        }
    }
    inp.finish(TOOL, 0)?;
    let mut out = std::io::stdout().lock();
    if a.json {
        writeln!(out, "{}", serde_json::to_string_pretty(&ev.to_json(&a.k, a.bootstrap, a.seed))?)?;
    } else {
        write!(out, "{}", ev.to_table(&a.k, a.bootstrap, a.seed))?;
    }
    Ok(ExitCode::SUCCESS)
}

fn convert(a: ConvertArgs) -> Result<ExitCode> {
    let mut output = a.output.clone();
    if output.format.is_none() && output.output.as_ref().is_none_or(|p| p.as_os_str() == "-") {
        // Stdout: the opposite of the first input's format.
        let first = a.input.input.first().cloned().unwrap_or_else(|| PathBuf::from("-"));
        if first.as_os_str() != "-" {
            let rd = arl_core::io::RecordReader::open(&first)?;
            output.format = Some(match rd.format() {
                arl_core::io::Format::Jsonl => arl_core::io::Format::Parquet,
                arl_core::io::Format::Parquet => arl_core::io::Format::Jsonl,
            });
        }
    }
    let mut inp = cli::Input::open(&a.input.spec()?)?;
    let mut out = output.spec().open()?;
    let pb = cli::progress(a.input.quiet, None, "records");
    while let Some(batch) = inp.next_batch()? {
        pb.inc(batch.len() as u64);
        out.write_all(batch.into_iter().map(|(_, r)| r).collect())?;
        out.flush()?;
    }
    pb.finish_and_clear();
    let n = out.count();
    out.finish().context("writing output")?;
    inp.finish(TOOL, n)?;
    Ok(ExitCode::SUCCESS)
}

fn show(a: ShowArgs) -> Result<ExitCode> {
    let mut inp = cli::Input::open(&a.input.spec()?)?;
    let mut seen = 0u64;
    let mut found: Option<(arl_core::io::Pos, Record)> = None;
    'outer: while let Some(batch) = inp.next_batch()? {
        for (pos, r) in batch {
            let hit = match &a.prompt_id {
                Some(id) => r.prompt_id.as_deref() == Some(id) && r.sample_index.unwrap_or(0) == a.sample,
                None => seen == a.index,
            };
            seen += 1;
            if hit {
                found = Some((pos, r));
                break 'outer;
            }
        }
    }
    let Some((pos, rec)) = found else {
        let what = match &a.prompt_id {
            Some(id) => format!("no record with prompt_id `{id}` and sample_index {}", a.sample),
            None => format!("no record {} (the input has {seen})", a.index),
        };
        return Err(cli::usage(what));
    };
    let tok = match &a.tokenizer {
        Some(d) => Some(Tokenizer::load(d)?),
        None => None,
    };
    let color = match a.color {
        Color::Always => true,
        Color::Never => false,
        Color::Auto => cli::stdout_color(),
    };
    let text = if a.json {
        serde_json::to_string_pretty(&rec.to_value())? + "\n"
    } else {
        show::render(&pos, &rec, tok.as_ref(), a.tokens, color)
    };
    std::io::stdout().lock().write_all(text.as_bytes())?;
    Ok(ExitCode::SUCCESS)
}

fn main() -> std::process::ExitCode {
    arl_core::cli::main(TOOL, run)
}
