//! `arl-advantage`: per-token `advantages` and `returns` for every trajectory.
//!
//! Reads trajectory records (JSONL or Parquet), writes them back with
//! `advantages` and `returns` set (one entry per response token, 0 where
//! `loss_mask` is 0) and every other field unchanged. The maths lives in
//! [`arl_advantage`]; grouping by `prompt_id` in [`arl_core::group`].
//! Exit codes: see [`arl_core::cli::exit`].
use anyhow::{Context, Result};
use arl_advantage::{self as adv, ChunkedGae, KlEstimator, MaskedMoments};
use arl_core::args::{InputArgs, OutputArgs};
use arl_core::cli::{self, EXIT_CODES_HELP};
use arl_core::group::{Group, Grouper};
use arl_core::io::Pos;
use arl_core::record::Record;
use clap::{Parser, ValueEnum};
use rayon::prelude::*;
use std::process::ExitCode;
use std::time::{Duration, Instant};

pub const TOOL: &str = "arl-advantage";

/// Compute per-token advantages and returns: GRPO, Dr.GRPO, RLOO, REINFORCE++, REINFORCE++-baseline, GAE
///
/// Groups are the records that share a `prompt_id` (never neighbours in the
/// file); a duplicated (`prompt_id`, `sample_index`) is a bad record. Each
/// group is normalised on its own, whatever its size; a group of one gets
/// advantage 0 under grpo/rloo, with a warning.
///
/// Where the reward sits: grpo, rloo and reinforce++-baseline spread the
/// group-relative scalar over every trained token; reinforce++ adds the reward
/// on the last trained token (the last token when none is trained); gae adds it
/// on the last response token (as slime does). Every response token whose
/// `loss_mask` is 0 (tool or environment output) gets advantage and return 0.
/// `returns` is A + V for gae, the discounted return for reinforce++, and the
/// advantage itself for the other estimators.
///
/// Streaming: with `--group-size N` a group is written as soon as its N-th
/// record arrives, so memory holds only the groups in flight; without it,
/// groups are held until the input ends. reinforce++ and gae need no groups
/// and stream record by record. Batch whitening (`--normalize`, the default for
/// reinforce++ and reinforce++-baseline) needs the whole batch: the output is
/// written only once the input has ended.
///
/// Output order: with `--group-size`, groups in the order they complete; without
/// it, groups in the order of their first record; reinforce++ and gae keep the
/// input order. Records keep their input order within a group.
///
/// Fields read: `reward`, `loss_mask`; `prompt_id` and `sample_index` for
/// the group estimators; `rollout_log_probs` and `ref_log_probs` when
/// `--kl-coef` is not 0; `values` for gae. A record without one of them is a
/// bad record (see `--on-error`).
///
/// Parquet by columns: when the input is one Parquet file with arl's columns
/// (as arl writes it) and the output is Parquet, only the fields above are
/// decoded; every other column reaches the output undecoded (its encoded
/// chunks copied, for row groups that keep all their rows in order) or as
/// Arrow arrays (row groups that lose or reorder rows), and `advantages` and
/// `returns` are encoded alongside. The output equals the record path's.
/// Not checked on that path, because never read: `loss_mask` against
/// `len(tokens) - prompt_len`, and the lengths of the input's old
/// `advantages`/`returns` (replaced anyway); a corrupt column chunk that is
/// not read is copied as it is and fails its first reader (Parquet pages
/// carry no checksum). `ARL_NO_PASS_THROUGH=1` reads and writes whole records.
#[derive(Debug, Parser)]
#[command(name = "arl-advantage", version, after_long_help = EXIT_CODES_HELP)]
pub struct Args {
    /// Advantage estimator
    #[arg(long, value_enum, default_value_t = Estimator::Grpo, help_heading = "Estimator")]
    pub estimator: Estimator,

    /// grpo: do not divide by the group's std (Dr.GRPO: reward minus the group mean)
    #[arg(long, help_heading = "Estimator")]
    pub no_std: bool,

    /// Discount factor γ (reinforce++ returns, gae)
    #[arg(long, default_value_t = 1.0, value_name = "G", help_heading = "Estimator")]
    pub gamma: f32,

    /// GAE λ
    #[arg(long = "lambda", default_value_t = 1.0, value_name = "L", help_heading = "Estimator")]
    pub lambda: f32,

    /// gae: `vanilla` reverse scan, or `chunked` (slime's blocks of `--chunk`
    /// tokens in triangular-matrix form); both agree to 1e-5
    #[arg(long, value_enum, default_value_t = GaeImpl::Vanilla, value_name = "IMPL", help_heading = "Estimator")]
    pub gae_impl: GaeImpl,

    /// Block length of the chunked GAE
    #[arg(long, default_value_t = 128, value_name = "N", help_heading = "Estimator")]
    pub chunk: usize,

    /// KL reward shaping: subtract kl_coef·KL on every trained token
    /// (reinforce++, reinforce++-baseline, gae); 0 turns it off. grpo and rloo
    /// put KL in the loss instead (arl-train)
    #[arg(long, default_value_t = 0.0, value_name = "C", help_heading = "KL")]
    pub kl_coef: f32,

    /// KL estimator from `rollout_log_probs` (log p) and `ref_log_probs` (log p_ref):
    /// k1 = log p − log p_ref; k2 = (log p − log p_ref)²/2;
    /// k3 = e^(log p_ref − log p) − 1 − (log p_ref − log p); low_var_kl = k3 clamped to ±10
    #[arg(long, value_enum, default_value_t = KlEstimator::K1, value_name = "EST", help_heading = "KL")]
    pub kl_estimator: KlEstimator,

    /// Whiten the advantages over the whole batch: (A − mean) / sqrt(var + 1e-8)
    /// with the mean and unbiased variance over trained tokens only. Default: on
    /// for reinforce++ and reinforce++-baseline, off otherwise. Holds the whole
    /// batch in memory: nothing is written before the input ends
    #[arg(long, overrides_with = "no_normalize", help_heading = "Normalisation")]
    pub normalize: bool,

    /// Do not whiten over the batch
    #[arg(long, overrides_with = "normalize", help_heading = "Normalisation")]
    pub no_normalize: bool,

    /// Expected group size: each group is written as soon as it has N records;
    /// a group of another size is an error (bad records) unless `--allow-uneven`
    #[arg(long, value_name = "N", help_heading = "Groups")]
    pub group_size: Option<usize>,

    /// With `--group-size`: keep groups that end up smaller (written when the
    /// input ends), each normalised on its own
    #[arg(long, requires = "group_size", help_heading = "Groups")]
    pub allow_uneven: bool,

    /// Print the time spent reading, computing and writing, and the compute
    /// step's throughput in response tokens/s, on stderr
    #[arg(long)]
    pub timings: bool,

    #[command(flatten)]
    pub input: InputArgs,

    #[command(flatten)]
    pub output: OutputArgs,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum Estimator {
    /// (r − group mean) / (group std + 1e-6), Bessel std (DeepSeekMath); with `--no-std`, Dr.GRPO
    Grpo,
    /// r − mean of the other samples in the group (Ahmadian et al. 2024)
    Rloo,
    /// discounted returns of −kl_coef·KL per token plus the reward, whitened (Hu 2025)
    #[value(name = "reinforce++")]
    ReinforcePp,
    /// r − group mean − kl_coef·KL per token, whitened
    #[value(name = "reinforce++-baseline")]
    ReinforcePpBaseline,
    /// generalised advantage estimation from `values` (Schulman et al. 2016)
    Gae,
}

impl Estimator {
    fn grouped(self) -> bool {
        matches!(self, Estimator::Grpo | Estimator::Rloo | Estimator::ReinforcePpBaseline)
    }
    fn uses_kl(self) -> bool {
        matches!(self, Estimator::ReinforcePp | Estimator::ReinforcePpBaseline | Estimator::Gae)
    }
    fn name(self) -> &'static str {
        match self {
            Estimator::Grpo => "grpo",
            Estimator::Rloo => "rloo",
            Estimator::ReinforcePp => "reinforce++",
            Estimator::ReinforcePpBaseline => "reinforce++-baseline",
            Estimator::Gae => "gae",
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum GaeImpl {
    Vanilla,
    Chunked,
}

/// Everything the per-record maths needs, fixed for the run.
pub struct Config {
    pub estimator: Estimator,
    pub no_std: bool,
    pub gamma: f32,
    pub lambda: f32,
    pub chunked: Option<ChunkedGae>,
    pub kl_coef: f32,
    pub kl_estimator: KlEstimator,
}

impl Config {
    pub fn from_args(a: &Args) -> Result<Config> {
        if !(0.0..=1.0).contains(&a.gamma) || !(0.0..=1.0).contains(&a.lambda) {
            return Err(cli::usage(format!(
                "`--gamma` and `--lambda` must be in [0, 1], got {} and {}",
                a.gamma, a.lambda
            )));
        }
        if !a.kl_coef.is_finite() {
            return Err(cli::usage("`--kl-coef` must be a finite number"));
        }
        if a.kl_coef != 0.0 && !a.estimator.uses_kl() {
            return Err(cli::hint(
                cli::usage(format!(
                    "`--kl-coef` shapes the reward of reinforce++, reinforce++-baseline and gae, not `{}`",
                    a.estimator.name()
                )),
                "with grpo/rloo, put KL in the loss: `arl-train --kl-loss-coef`",
            ));
        }
        if a.no_std && a.estimator != Estimator::Grpo {
            return Err(cli::usage("`--no-std` only applies to `--estimator grpo`"));
        }
        if a.group_size.is_some() && !a.estimator.grouped() {
            return Err(cli::usage(format!(
                "`--group-size` applies to group estimators (grpo, rloo, reinforce++-baseline), not `{}`",
                a.estimator.name()
            )));
        }
        if a.group_size == Some(0) || a.chunk == 0 {
            return Err(cli::usage("`--group-size` and `--chunk` must be at least 1"));
        }
        let chunked = (a.estimator == Estimator::Gae && a.gae_impl == GaeImpl::Chunked)
            .then(|| ChunkedGae::new(a.gamma, a.lambda, a.chunk));
        Ok(Config {
            estimator: a.estimator,
            no_std: a.no_std,
            gamma: a.gamma,
            lambda: a.lambda,
            chunked,
            kl_coef: a.kl_coef,
            kl_estimator: a.kl_estimator,
        })
    }

    /// The fields this configuration reads (the only columns decoded from a
    /// Parquet input; the others pass through).
    pub fn reads(&self) -> Vec<&'static str> {
        let mut f = vec!["reward", "loss_mask"];
        if self.estimator.grouped() {
            f.extend(["prompt_id", "sample_index"]);
        }
        if self.kl_coef != 0.0 {
            f.extend(["rollout_log_probs", "ref_log_probs"]);
        }
        if self.estimator == Estimator::Gae {
            f.push("values");
        }
        f
    }

    /// Why this record cannot be processed, if it cannot.
    pub fn check(&self, r: &Record) -> Option<String> {
        match r.reward {
            None => return Some("field `reward`: missing".into()),
            Some(x) if !x.is_finite() => return Some(format!("field `reward`: {x} is not a finite number")),
            _ => {}
        }
        if r.loss_mask.is_none() {
            return Some("field `loss_mask`: missing; it says which response tokens are trained".into());
        }
        if self.estimator.grouped() {
            if r.prompt_id.is_none() {
                return Some(format!("field `prompt_id`: missing; `{}` forms groups by it", self.estimator.name()));
            }
            if r.sample_index.is_none() {
                return Some(format!(
                    "field `sample_index`: missing; `{}` needs it to tell a group's samples apart",
                    self.estimator.name()
                ));
            }
        }
        if self.kl_coef != 0.0 {
            for (name, v) in [("rollout_log_probs", &r.rollout_log_probs), ("ref_log_probs", &r.ref_log_probs)] {
                if v.is_none() {
                    return Some(format!("field `{name}`: missing; `--kl-coef` needs it"));
                }
            }
        }
        if self.estimator == Estimator::Gae && r.values.is_none() {
            return Some("field `values`: missing; `--estimator gae` needs the critic's values".into());
        }
        None
    }

    /// Sets `advantages` and `returns` (before batch whitening). `scalar` is the
    /// group-relative value for group estimators.
    fn fill(&self, r: &mut Record, scalar: f32, scratch: &mut Vec<f32>) {
        let mask = r.loss_mask.take().unwrap_or_default();
        let reward = r.reward.unwrap_or(0.0);
        match self.estimator {
            Estimator::Grpo | Estimator::Rloo => {
                let a = adv::broadcast(scalar, &mask);
                r.returns = Some(a.clone());
                r.advantages = Some(a);
            }
            Estimator::ReinforcePpBaseline => {
                adv::kl_penalty(
                    self.kl_estimator,
                    self.kl_coef,
                    r.rollout_log_probs.as_deref(),
                    r.ref_log_probs.as_deref(),
                    &mask,
                    scratch,
                );
                let a: Vec<f32> =
                    scratch.iter().zip(&mask).map(|(p, &m)| if m != 0 { scalar + p } else { 0.0 }).collect();
                r.returns = Some(a.clone());
                r.advantages = Some(a);
            }
            Estimator::ReinforcePp => {
                let mut g = Vec::new();
                adv::kl_penalty(
                    self.kl_estimator,
                    self.kl_coef,
                    r.rollout_log_probs.as_deref(),
                    r.ref_log_probs.as_deref(),
                    &mask,
                    &mut g,
                );
                adv::reinforce_pp_returns(&mut g, &mask, reward, self.gamma);
                adv::apply_mask(&mut g, &mask);
                r.advantages = Some(g.clone());
                r.returns = Some(g);
            }
            Estimator::Gae => {
                let values = r.values.as_deref().unwrap_or(&[]);
                let n = mask.len();
                // Reuse the buffers of the input's advantages/returns, if any.
                let reuse = |v: Option<Vec<f32>>| {
                    let mut v = v.unwrap_or_default();
                    v.clear();
                    v.resize(n, 0.0);
                    v
                };
                let (mut a, mut ret) = (reuse(r.advantages.take()), reuse(r.returns.take()));
                let kl = self.kl_coef != 0.0 && r.rollout_log_probs.is_some() && r.ref_log_probs.is_some();
                if kl {
                    adv::kl_penalty(
                        self.kl_estimator,
                        self.kl_coef,
                        r.rollout_log_probs.as_deref(),
                        r.ref_log_probs.as_deref(),
                        &mask,
                        scratch,
                    );
                }
                match &self.chunked {
                    Some(c) => {
                        if !kl {
                            scratch.clear();
                            scratch.resize(n, 0.0);
                        }
                        if let Some(last) = scratch.last_mut() {
                            *last += reward;
                        }
                        c.run(scratch, values, self.gamma, &mut a);
                        for ((r, a), v) in ret.iter_mut().zip(&a).zip(values) {
                            *r = a + v;
                        }
                        adv::apply_mask(&mut a, &mask);
                        adv::apply_mask(&mut ret, &mask);
                    }
                    None => {
                        let k = kl.then_some(&scratch[..]);
                        adv::gae_masked(k, reward, values, &mask, self.gamma, self.lambda, &mut a, &mut ret);
                    }
                }
                r.advantages = Some(a);
                r.returns = Some(ret);
            }
        }
        r.loss_mask = Some(mask);
    }

    /// Computes a whole group; returns true when it was a group of one.
    pub fn group(&self, g: &mut Group) -> bool {
        let rewards: Vec<f64> = g.items.iter().map(|(_, r)| r.reward.unwrap_or(0.0) as f64).collect();
        let scalars = match self.estimator {
            Estimator::Grpo => adv::grpo(&rewards, self.no_std),
            Estimator::Rloo => adv::rloo(&rewards),
            _ => adv::group_mean_baseline(&rewards),
        };
        let mut scratch = Vec::new();
        for ((_, r), s) in g.items.iter_mut().zip(scalars) {
            self.fill(r, s as f32, &mut scratch);
        }
        g.items.len() == 1
    }

    /// Computes one record of a per-record estimator (reinforce++, gae).
    pub fn record(&self, r: &mut Record, scratch: &mut Vec<f32>) {
        self.fill(r, 0.0, scratch)
    }
}

#[derive(Default)]
struct Clock {
    read: Duration,
    compute: Duration,
    write: Duration,
    tokens: u64,
}

/// Output stage: writes now, or holds everything for batch whitening.
struct Sink {
    out: arl_core::io::RecordWriter,
    hold: Option<Vec<Record>>,
}

impl Sink {
    fn put(&mut self, recs: Vec<Record>, clock: &mut Clock) -> Result<()> {
        match &mut self.hold {
            Some(h) => h.extend(recs),
            None => {
                let t = Instant::now();
                self.out.write_all(recs)?;
                self.out.flush()?;
                clock.write += t.elapsed();
            }
        }
        Ok(())
    }
}

pub fn run(a: Args) -> Result<ExitCode> {
    let cfg = Config::from_args(&a)?;
    let normalize = if a.normalize {
        true
    } else if a.no_normalize {
        false
    } else {
        matches!(a.estimator, Estimator::ReinforcePp | Estimator::ReinforcePpBaseline)
    };
    let (mut inp, out) =
        cli::Input::open_columns(&a.input.spec()?, &a.output.spec(), &cfg.reads(), &["advantages", "returns"])?;
    let mut sink = Sink { out, hold: normalize.then(Vec::new) };
    let mut grouper = Grouper::new(a.group_size);
    let mut clock = Clock::default();
    let mut singletons: (u64, Option<String>) = (0, None);
    let pb = cli::progress(a.input.quiet, None, "records");

    loop {
        let t = Instant::now();
        let Some(batch) = inp.next_batch()? else { break };
        clock.read += t.elapsed();
        pb.inc(batch.len() as u64);
        let mut ready: Vec<(Pos, Record)> = Vec::new();
        let mut groups: Vec<Group> = Vec::new();
        for (pos, rec) in batch {
            if let Some(why) = cfg.check(&rec) {
                inp.reject(&pos, &rec, why)?;
                continue;
            }
            if !cfg.estimator.grouped() {
                ready.push((pos, rec));
                continue;
            }
            match grouper.push(pos, rec) {
                Ok(Some(g)) => groups.push(g),
                Ok(None) => {}
                Err((pos, rec, why)) => inp.reject(&pos, &rec, why)?,
            }
        }
        if !ready.is_empty() {
            let recs = compute_records(&cfg, ready, &mut clock);
            sink.put(recs, &mut clock)?;
        }
        if !groups.is_empty() {
            let recs = compute_groups(&cfg, groups, &mut clock, &mut singletons);
            sink.put(recs, &mut clock)?;
        }
    }

    // The end of input: groups still held are complete now, or short.
    let mut rest = Vec::new();
    for g in grouper.drain() {
        match a.group_size {
            Some(n) if !a.allow_uneven => {
                let why = format!(
                    "group `{}` has {} records but `--group-size {n}` expects {n}; pass `--allow-uneven` to keep short groups",
                    g.id,
                    g.items.len()
                );
                for (pos, rec) in &g.items {
                    inp.reject(pos, rec, &why)?;
                }
            }
            _ => rest.push(g),
        }
    }
    if !rest.is_empty() {
        let recs = compute_groups(&cfg, rest, &mut clock, &mut singletons);
        sink.put(recs, &mut clock)?;
    }

    if let Some(mut all) = sink.hold.take() {
        let t = Instant::now();
        let m = all
            .par_iter()
            .fold(MaskedMoments::default, |mut m, r| {
                if let (Some(a), Some(mask)) = (&r.advantages, &r.loss_mask) {
                    m.add(a, mask);
                }
                m
            })
            .reduce(MaskedMoments::default, MaskedMoments::merge);
        let w = m.whitener();
        all.par_iter_mut().for_each(|r| {
            if let (Some(a), Some(mask)) = (r.advantages.as_mut(), r.loss_mask.as_ref()) {
                adv::whiten_masked(a, mask, w);
            }
            // Outside reinforce++ and gae, `returns` is the (final) advantage.
            if !matches!(cfg.estimator, Estimator::ReinforcePp | Estimator::Gae) {
                r.returns = r.advantages.clone();
            }
        });
        clock.compute += t.elapsed();
        let t = Instant::now();
        sink.out.write_all(all)?;
        clock.write += t.elapsed();
    }
    pb.finish_and_clear();

    if singletons.0 > 0 && !a.input.quiet {
        cli::warn(
            TOOL,
            format!(
                "{} group(s) of a single sample (e.g. `prompt_id` `{}`) got advantage 0: a group needs two samples for a baseline",
                singletons.0,
                singletons.1.as_deref().unwrap_or("?")
            ),
        );
    }
    let t = Instant::now();
    let written = sink.out.count();
    sink.out.finish().context("writing output")?;
    clock.write += t.elapsed();
    if a.timings {
        let c = clock.compute.as_secs_f64();
        eprintln!(
            "{TOOL}: timings: read {:.3} s, compute {:.3} s ({:.1} M response tokens/s over {} tokens, {} threads), write {:.3} s",
            clock.read.as_secs_f64(),
            c,
            clock.tokens as f64 / c.max(1e-9) / 1e6,
            clock.tokens,
            rayon::current_num_threads(),
            clock.write.as_secs_f64()
        );
    }
    inp.finish(TOOL, written)?;
    Ok(ExitCode::SUCCESS)
}

fn compute_records(cfg: &Config, items: Vec<(Pos, Record)>, clock: &mut Clock) -> Vec<Record> {
    let t = Instant::now();
    let mut recs: Vec<Record> = items.into_iter().map(|(_, r)| r).collect();
    clock.tokens += recs.iter().map(|r| r.loss_mask.as_ref().map_or(0, Vec::len) as u64).sum::<u64>();
    recs.par_iter_mut().for_each_init(Vec::new, |scratch, r| cfg.record(r, scratch));
    clock.compute += t.elapsed();
    recs
}

fn compute_groups(
    cfg: &Config,
    mut groups: Vec<Group>,
    clock: &mut Clock,
    singletons: &mut (u64, Option<String>),
) -> Vec<Record> {
    let t = Instant::now();
    clock.tokens +=
        groups.iter().flat_map(|g| &g.items).map(|(_, r)| r.loss_mask.as_ref().map_or(0, Vec::len) as u64).sum::<u64>();
    let single: Vec<bool> = groups.par_iter_mut().map(|g| cfg.group(g)).collect();
    for (g, s) in groups.iter().zip(single) {
        if s {
            singletons.0 += 1;
            singletons.1.get_or_insert_with(|| g.id.clone());
        }
    }
    clock.compute += t.elapsed();
    groups.into_iter().flat_map(|g| g.items).map(|(_, r)| r).collect()
}

fn main() -> std::process::ExitCode {
    arl_core::cli::main(TOOL, run)
}
