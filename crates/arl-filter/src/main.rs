//! `arl-filter`: drop trajectories and groups before training (DAPO dynamic
//! sampling, status, length, staleness, over-sampling cut).
//!
//! Reads trajectory records (JSONL or Parquet), writes the kept ones
//! unchanged, and reports on stderr (and with `--stats-json` in a file) how
//! many records and groups were kept and dropped, by reason. The decisions
//! live in [`arl_filter`]. Exit codes: see [`arl_core::cli::exit`].
use anyhow::{Context, Result};
use arl_core::args::{InputArgs, OutputArgs};
use arl_core::cli::{self, EXIT_CODES_HELP};
use arl_core::group::{Group, Grouper};
use arl_core::io::AtomicFile;
use arl_core::record::{Record, Status};
use arl_filter::{Rules, Tally};
use clap::Parser;
use std::collections::HashMap;
use std::io::Write;
use std::path::PathBuf;
use std::process::ExitCode;

pub const TOOL: &str = "arl-filter";

/// Drop trajectories and groups: zero reward spread (DAPO), status, length, staleness, over-sampling
///
/// Per-record filters run first, in this order, and a dropped record counts
/// under the first that matches: `--drop-status`, `--min-response-len`,
/// `--max-response-len`, staleness. Group filters then look at each group's
/// surviving records, in this order: a group left with no record
/// (all_records_dropped), `--group-size` (incomplete_group), `--drop-zero-std`
/// (zero_std), `--keep-groups` (over_keep_groups). Groups are the records that
/// share a `prompt_id`, never neighbours in the file; a duplicated
/// (`prompt_id`, `sample_index`) is a bad record.
///
/// Streaming: without group filters, records stream one by one in input order.
/// With `--group-size N`, a group is judged and written as soon as its N-th
/// record arrives (groups in the order they complete); with other group filters
/// and no `--group-size`, groups are held until the input ends and written in
/// the order of their first record. Records keep their input order within a group.
///
/// The summary on stderr (unless `--quiet`) and in `--stats-json` counts
/// records read = kept + dropped + rejected (bad records), and groups
/// in = kept + dropped, with each reason's records and groups.
///
/// Parquet by columns: when the input is one Parquet file with arl's columns
/// and the output is Parquet, only the fields the filters read are decoded
/// (`reward` for --drop-zero-std, `status`, `tokens`/`prompt_len`/`loss_mask`
/// for the length filters, `weight_versions` for staleness, `prompt_id` for
/// groups); a row group that keeps all its rows is copied undecoded; in one
/// that loses rows, the pages of the per-token columns that lose none are
/// copied as they are (found by the input's offset index, their rows counted
/// from their repetition levels) and only the others, and
/// the other columns, are decoded, filtered as Arrow arrays and encoded
/// again. The output equals the record path's. Fields not read are not checked (e.g. per-token lists
/// against `tokens` when no length filter is on); a corrupt column chunk
/// that is copied undecoded fails its first reader. `ARL_NO_PASS_THROUGH=1`
/// reads and writes whole records.
#[derive(Debug, Parser)]
#[command(name = "arl-filter", version, after_long_help = EXIT_CODES_HELP)]
pub struct Args {
    /// Drop groups whose rewards do not vary: population std of the group's
    /// surviving rewards ≤ `--zero-std-eps` (DAPO dynamic sampling; a group of
    /// one has no spread and is dropped)
    #[arg(long, help_heading = "Group filters")]
    pub drop_zero_std: bool,

    /// The std at or below which `--drop-zero-std` counts a group as constant
    #[arg(long, default_value_t = 1e-6, value_name = "EPS", help_heading = "Group filters")]
    pub zero_std_eps: f64,

    /// Expected group size: a group that does not keep all N records after the
    /// per-record filters (or that has fewer than N in the input) is dropped
    /// whole, so the output has only full groups. Also lets groups stream
    #[arg(long, value_name = "N", help_heading = "Group filters")]
    pub group_size: Option<usize>,

    /// Keep only the first N groups that pass every other filter (over-sampling:
    /// roll out more prompts than needed, keep a batch of N); later groups are
    /// dropped as over_keep_groups
    #[arg(long, value_name = "N", help_heading = "Group filters")]
    pub keep_groups: Option<u64>,

    /// Drop records with one of these statuses, comma-separated
    /// (completed, truncated, aborted, failed)
    #[arg(long, value_delimiter = ',', value_parser = parse_status, value_name = "STATUS,…", help_heading = "Record filters")]
    pub drop_status: Vec<Status>,

    /// Drop records whose response (len(tokens) − prompt_len, else len(loss_mask))
    /// is shorter than N tokens
    #[arg(long, value_name = "N", help_heading = "Record filters")]
    pub min_response_len: Option<usize>,

    /// Drop records whose response is longer than N tokens
    #[arg(long, value_name = "N", help_heading = "Record filters")]
    pub max_response_len: Option<usize>,

    /// The trainer's current weight version (a training step number)
    #[arg(long, value_name = "V", requires = "max_staleness", help_heading = "Record filters")]
    pub current_version: Option<u64>,

    /// Drop records generated more than K versions ago: V − (oldest of
    /// `weight_versions`, as integers) > K
    #[arg(long, value_name = "K", requires = "current_version", help_heading = "Record filters")]
    pub max_staleness: Option<u64>,

    /// Also write the summary as JSON to FILE (written atomically)
    #[arg(long, value_name = "FILE")]
    pub stats_json: Option<PathBuf>,

    #[command(flatten)]
    pub input: InputArgs,

    #[command(flatten)]
    pub output: OutputArgs,
}

fn parse_status(s: &str) -> Result<Status, String> {
    Status::parse(s.trim()).ok_or_else(|| format!("`{s}` is not a status (completed, truncated, aborted, failed)"))
}

impl Args {
    pub fn rules(&self) -> Result<Rules> {
        if self.group_size == Some(0) {
            return Err(cli::usage("`--group-size` must be at least 1"));
        }
        if let (Some(a), Some(b)) = (self.min_response_len, self.max_response_len) {
            if a > b {
                return Err(cli::usage(format!("`--min-response-len {a}` is larger than `--max-response-len {b}`")));
            }
        }
        if self.zero_std_eps.is_nan() || self.zero_std_eps < 0.0 {
            return Err(cli::usage("`--zero-std-eps` must be a number ≥ 0"));
        }
        Ok(Rules {
            drop_status: self.drop_status.clone(),
            min_len: self.min_response_len,
            max_len: self.max_response_len,
            staleness: self.current_version.zip(self.max_staleness),
            zero_std: self.drop_zero_std.then_some(self.zero_std_eps),
            group_size: self.group_size,
            keep_groups: self.keep_groups,
        })
    }
}

/// Judges one group and returns the records to write.
fn judge(rules: &Rules, tally: &mut Tally, g: Group) -> Vec<Record> {
    let mut kept = Vec::with_capacity(g.items.len());
    for (_, r) in g.items {
        match rules.record_reason(&r) {
            Some(why) => tally.drop_records(why, 1),
            None => kept.push(r),
        }
    }
    let refs: Vec<&Record> = kept.iter().collect();
    let mut reason = rules.group_reason(&refs);
    if reason.is_none() && rules.keep_groups.is_some_and(|n| tally.groups_kept >= n) {
        reason = Some("over_keep_groups");
    }
    match reason {
        Some(why) => {
            tally.drop_group(why);
            tally.drop_records(why, kept.len() as u64);
            Vec::new()
        }
        None => {
            tally.groups_kept += 1;
            tally.records_kept += kept.len() as u64;
            kept
        }
    }
}

pub fn run(a: Args) -> Result<ExitCode> {
    let rules = a.rules()?;
    let (mut inp, mut out) = cli::Input::open_columns(&a.input.spec()?, &a.output.spec(), &rules.reads(), &[])?;
    let mut tally = Tally::default();
    let pb = cli::progress(a.input.quiet, None, "records");
    let grouped = rules.grouped();
    let mut grouper = Grouper::new(rules.group_size);
    // Per-record mode: prompt_id → whether any of its records was kept.
    let mut seen: HashMap<String, bool> = HashMap::new();

    while let Some(batch) = inp.next_batch()? {
        pb.inc(batch.len() as u64);
        let mut write = Vec::new();
        for (pos, rec) in batch {
            if let Some(why) = rules.check(&rec) {
                inp.reject(&pos, &rec, why)?;
                continue;
            }
            if grouped {
                match grouper.push(pos, rec) {
                    Ok(Some(g)) => write.extend(judge(&rules, &mut tally, g)),
                    Ok(None) => {}
                    Err((pos, rec, why)) => inp.reject(&pos, &rec, why)?,
                }
                continue;
            }
            let keep = match rules.record_reason(&rec) {
                Some(why) => {
                    tally.drop_records(why, 1);
                    false
                }
                None => {
                    tally.records_kept += 1;
                    true
                }
            };
            match &rec.prompt_id {
                Some(id) => *seen.entry(id.clone()).or_insert(false) |= keep,
                None if keep => tally.groups_kept += 1,
                None => tally.drop_group("all_records_dropped"),
            }
            if keep {
                write.push(rec);
            }
        }
        out.write_all(write)?;
        out.flush()?;
    }
    for g in grouper.drain() {
        let recs = judge(&rules, &mut tally, g);
        out.write_all(recs)?;
    }
    for (_, kept) in seen {
        if kept {
            tally.groups_kept += 1;
        } else {
            tally.drop_group("all_records_dropped");
        }
    }
    pb.finish_and_clear();
    let written = out.count();
    out.finish().context("writing output")?;
    let (read, rejected) = (inp.read, inp.rejected());
    if let Some(p) = &a.stats_json {
        let mut f = AtomicFile::create(p)?;
        let text = serde_json::to_string_pretty(&tally.to_json(read, rejected))?;
        f.write_all(text.as_bytes())?;
        f.write_all(b"\n")?;
        f.finish().with_context(|| format!("writing `{}`", p.display()))?;
    }
    if !a.input.quiet {
        eprint!("{}", tally.to_text(TOOL, read, rejected));
    }
    inp.finish(TOOL, written)?;
    Ok(ExitCode::SUCCESS)
}

fn main() -> std::process::ExitCode {
    arl_core::cli::main(TOOL, run)
}
