//! The run's loop (`drive`): the dataset read and planned into jobs, groups
//! started on a single-threaded runtime as slots free up (enough of them to
//! keep `--concurrency` requests busy), each written as it completes, until
//! the jobs or `--target-groups` run out or a group fails; then the summary.
use crate::arena::Arena;
use crate::client::{ClientStats, GenError};
use crate::config::{Config, TOOL};
use crate::env::Envs;
use crate::episode::Shared;
use crate::group::{self, Group};
use crate::{output, plan};
use anyhow::Result;
use arl_core::cli::{self, Input};
use arl_core::record::Record;
use serde_json::Value;
use std::collections::HashMap;
use std::process::ExitCode;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Instant;
use tokio::sync::mpsc::UnboundedSender;
use tokio::sync::OwnedSemaphorePermit;

/// What the written groups add up to, for the progress line and the summary.
#[derive(Default)]
struct Tally {
    tool_calls: u64,
    tool_errors: u64,
    statuses: HashMap<&'static str, u64>,
    reward_sum: f64,
    reward_n: u64,
}

impl Tally {
    /// Counts a group's records, scoring them first with `--rm` (a record
    /// that cannot be scored, e.g. without a label, keeps no reward;
    /// arl-reward downstream would reject it with the reason).
    fn add(&mut self, recs: &mut [Record], spec: Option<&arl_reward::Spec>) {
        for r in recs.iter_mut() {
            if let Some(Ok(s)) = spec.map(|spec| arl_reward::score(spec, r)) {
                r.reward = Some(s.reward);
                r.reward_detail = Some(s.detail);
                self.reward_sum += s.reward as f64;
                self.reward_n += 1;
            }
            self.tool_calls += r.tool_calls.unwrap_or(0) as u64;
            self.tool_errors += r.meta("tool_errors").and_then(Value::as_u64).unwrap_or(0);
            *self.statuses.entry(r.status.map_or("none", |s| s.as_str())).or_default() += 1;
        }
    }

    fn mean_reward(&self) -> Option<f64> {
        (self.reward_n > 0).then(|| self.reward_sum / self.reward_n as f64)
    }

    /// The run's summary line on stderr.
    fn summary(&self, written: u64, resumed: u64, st: &ClientStats, aborted: usize, started: Instant) {
        let mut status_list: Vec<_> = self.statuses.iter().map(|(k, v)| format!("{v} {k}")).collect();
        status_list.sort();
        eprintln!(
            "{TOOL}: {} groups written ({} resumed), trajectories: {}; {} requests, {} retries, {} aborted; {} tool calls ({} errors); {} tokens generated in {:.1}s{}",
            written,
            resumed,
            if status_list.is_empty() { "none".to_string() } else { status_list.join(", ") },
            st.requests.load(Ordering::Relaxed),
            st.retries.load(Ordering::Relaxed),
            aborted,
            self.tool_calls,
            self.tool_errors,
            st.generated_tokens.load(Ordering::Relaxed),
            started.elapsed().as_secs_f64(),
            match self.mean_reward() {
                Some(m) => format!("; mean reward {m:.4} over {}", self.reward_n),
                None => String::new(),
            }
        );
    }
}

/// Runs the planned groups of `cfg` to the end (see the module doc) and
/// prints the summary unless `-q`.
pub(crate) async fn drive(
    cfg: Config,
    shared: Arc<Shared>,
    opponent: Option<Arc<Shared>>,
    envs: Envs,
    out_path: Option<std::path::PathBuf>,
) -> Result<ExitCode> {
    let n = cfg.n_samples_per_prompt;
    let mut input = Input::open(&cfg.input)?;
    let (prompts, positions) = plan::read_prompts(&cfg, &mut input)?;
    let mut out = output::Output::open(
        &cfg.output,
        out_path.as_deref(),
        cfg.resume,
        if cfg.arena { 2 * n } else { n },
        cfg.arena,
    )?;
    let resumed = out.done.len() as u64;
    let jobs = plan::plan_jobs(&cfg, &prompts, &positions, &out.done, &envs, &shared, &mut input)?;
    drop(positions);

    let target = cfg.target_groups;
    let total = match target {
        Some(t) => t.min(resumed + jobs.len() as u64),
        None => resumed + jobs.len() as u64,
    };
    let pb = cli::progress(cfg.input.quiet, Some(total), "groups");
    pb.set_position(resumed);
    let started = Instant::now();
    if let Some(t) = &shared.tracer {
        t.ready(jobs.len(), jobs.len() as u64 * n as u64);
    }

    // Enough active groups to keep `--concurrency` requests busy while some
    // episodes wait on tools; requests themselves are capped in the client.
    let per_group = if cfg.arena { 2 * n as usize } else { n as usize };
    let active = (2 * cfg.concurrency).div_ceil(per_group).max(1);
    let arena = cfg.arena.then(|| {
        Arc::new(Arena {
            retries: cfg.illegal_retries,
            max_response_len: cfg.max_response_len,
            opponent: cfg.opponent_endpoint.clone().unwrap_or_else(|| "self".into()),
        })
    });
    let group_slots = Arc::new(tokio::sync::Semaphore::new(active));
    let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel::<Result<Vec<Record>, GenError>>();
    let mut pending = jobs.into_iter();
    let mut next_job = pending.next();
    let mut running = 0usize;
    let mut written = resumed;
    let mut failure: Option<anyhow::Error> = None;
    let mut stopped_early = false;
    let mut tally = Tally::default();
    let spec = reward_spec(&cfg);

    if target.is_some_and(|t| written >= t) {
        next_job = None;
    }
    while next_job.is_some() || running > 0 {
        tokio::select! {
            biased;
            Some(res) = rx.recv() => {
                running -= 1;
                match res {
                    Ok(mut recs) => {
                        tally.add(&mut recs, spec.as_ref());
                        out.write_group(&recs)?;
                        written += 1;
                        pb.set_position(written);
                        let secs = started.elapsed().as_secs_f64().max(1e-3);
                        let tps = shared.client.stats.generated_tokens.load(Ordering::Relaxed) as f64 / secs;
                        pb.set_message(match tally.mean_reward() {
                            Some(m) => format!("groups, {tps:.0} tok/s, mean reward {m:.3}"),
                            None => format!("groups, {tps:.0} tok/s"),
                        });
                        if target.is_some_and(|t| written >= t) {
                            stopped_early = next_job.is_some() || running > 0;
                            break;
                        }
                    }
                    Err(GenError::Cancelled) => {}
                    Err(GenError::Fatal(e)) => {
                        failure = Some(e);
                        break;
                    }
                }
                // Groups completing together share one write; a lone one goes out at once.
                if rx.is_empty() {
                    out.flush()?;
                }
            }
            permit = group_slots.clone().acquire_owned(), if next_job.is_some() => {
                let Ok(permit) = permit else { break };
                let job = next_job.take().expect("guarded by the branch condition");
                next_job = pending.next();
                let group = job.start(&prompts);
                running += 1;
                spawn_group(group, permit, &shared, &opponent, &arena, &tx, n);
            }
        }
    }
    let aborted = if stopped_early || failure.is_some() { shared.client.abort_all().await } else { 0 };
    pb.finish_and_clear();

    if !cfg.input.quiet {
        tally.summary(written, resumed, &shared.client.stats, aborted, started);
    }
    if let Some(e) = failure {
        out.abandon()?;
        let e = e.context("generation failed");
        return Err(if out_path.is_some() {
            cli::hint(e, "completed groups are kept in the `.partial` file; rerun with `--resume` to continue")
        } else {
            e
        });
    }
    out.finish()?;
    input.finish(TOOL, written.saturating_sub(resumed) * n as u64)?;
    Ok(ExitCode::SUCCESS)
}

/// The reward model of `--rm`, which scores each group before it is written.
fn reward_spec(cfg: &Config) -> Option<arl_reward::Spec> {
    cfg.rm.as_deref().map(|name| {
        arl_reward::Spec::new(match name {
            "math" => arl_reward::Rm::Math(Default::default()),
            "exact" => arl_reward::Rm::Exact,
            "game" => arl_reward::Rm::Game(Default::default()),
            _ => arl_reward::Rm::F1,
        })
    })
}

/// Runs `job` in a task of its own, holding its slot (`permit`) until it
/// ends: a group of episodes, or in arena mode a group of games. Its records,
/// or why there are none, go to `tx`.
fn spawn_group(
    job: Group,
    permit: OwnedSemaphorePermit,
    shared: &Arc<Shared>,
    opponent: &Option<Arc<Shared>>,
    arena: &Option<Arc<Arena>>,
    tx: &UnboundedSender<Result<Vec<Record>, GenError>>,
    n: u32,
) {
    let (shared, tx) = (shared.clone(), tx.clone());
    let (arena, opponent) = (arena.clone(), opponent.clone());
    tokio::spawn(async move {
        let _permit = permit;
        let res = match &arena {
            Some(a) => group::run_games(a, &shared, opponent.as_deref(), job, n).await,
            None => group::run_group(&shared, job, n).await,
        };
        let _ = tx.send(res);
    });
}
