//! What a run plays: the dataset read and normalised into prompts, the
//! deterministic walk over them (`--batch-size`, `--step`, `--seed`), and
//! the jobs it gives — one per group still to run, its prompt rendered into
//! token ids.
use crate::config::Config;
use crate::env;
use crate::episode::Shared;
use crate::group::Group;
use anyhow::Result;
use arl_core::cli::Input;
use arl_core::record::Record;
use serde_json::{json, Value};
use std::collections::HashMap;
use std::sync::Arc;

/// The prompts of one run, after `--batch-size/--step/--seed`, as
/// (index into the dataset, epoch); without `--batch-size`, every prompt once
/// in order. Epoch `e` ≥ 1 suffixes the `prompt_id` with `@e` (see [`selected`]).
pub fn walk(n: usize, batch_size: Option<usize>, step: u64, seed: u64) -> Vec<(usize, u64)> {
    let Some(b) = batch_size else { return (0..n).map(|i| (i, 0)).collect() };
    let n = n as u64;
    if n == 0 || b == 0 {
        return Vec::new();
    }
    let mut perms: HashMap<u64, Vec<usize>> = HashMap::new();
    let mut out = Vec::with_capacity(b);
    for g in step * b as u64..(step + 1) * b as u64 {
        let epoch = g / n;
        let perm = perms.entry(epoch).or_insert_with(|| {
            let mut p: Vec<usize> = (0..n as usize).collect();
            arl_core::rng::Rng::new(arl_core::rng::mix(&[seed, epoch])).shuffle(&mut p);
            p
        });
        out.push((perm[(g % n) as usize], epoch));
    }
    out
}

/// The `prompt_id` a walked prompt runs under: its own, `@epoch` from the second epoch on.
fn walked_id(id: &str, epoch: u64) -> std::borrow::Cow<'_, str> {
    if epoch >= 1 {
        format!("{id}@{epoch}").into()
    } else {
        id.into()
    }
}

/// The record of a walked prompt (a copy, its `prompt_id` as [`walked_id`]).
pub fn selected(prompt: &Record, epoch: u64) -> Record {
    let mut r = prompt.clone();
    if epoch >= 1 {
        r.prompt_id = r.prompt_id.map(|id| walked_id(&id, epoch).into_owned());
    }
    r
}

/// One group to run: which prompt (its record is copied from the dataset when
/// the group starts, so a large dataset is not held twice), its token ids.
pub(crate) struct Job {
    idx: usize,
    epoch: u64,
    prompt_ids: Arc<[u32]>,
    env: Arc<env::Env>,
}

impl Job {
    /// The job of a walked prompt (`(index, epoch)`, as [`walk`] gives it)
    /// that runs in `env` from `prompt_ids` (none for an arena task, whose
    /// seats render their own prompts).
    fn new((idx, epoch): (usize, u64), env: Arc<env::Env>, prompt_ids: Vec<u32>) -> Job {
        // One exact-size allocation: every prompt's ids are held for the whole run.
        Job { idx, epoch, prompt_ids: Arc::from(prompt_ids), env }
    }

    /// The group this job starts: its prompt's record copied out of `prompts`.
    pub(crate) fn start(self, prompts: &[Box<Record>]) -> Group {
        Group { rec: selected(&prompts[self.idx], self.epoch), prompt_ids: self.prompt_ids, env: self.env }
    }
}

/// Renders a prompt record into token ids.
fn prompt_ids(rec: &Record, shared: &Shared, env: &env::Env, system: Option<&str>) -> Result<Vec<u32>, String> {
    let prompt = rec.prompt.as_deref().ok_or("field `prompt`: missing")?;
    let text = match &shared.template {
        None => prompt.to_string(),
        Some(t) => {
            let mut msgs = arl_core::dataset::prompt_messages(prompt)
                .unwrap_or_else(|| vec![json!({"role": "user", "content": prompt})]);
            if let Some(s) = system {
                if msgs.first().and_then(|m| m.get("role")).and_then(Value::as_str) != Some("system") {
                    msgs.insert(0, json!({"role": "system", "content": s}));
                }
            }
            let tools = (!env.definitions.is_empty()).then_some(&env.definitions[..]);
            shared.render(t, &msgs, tools).map_err(|e| format!("field `prompt`: {e:#}"))?
        }
    };
    let ids = shared.tokenizer.encode(&text).map_err(|e| format!("field `prompt`: {e:#}"))?;
    if ids.is_empty() {
        return Err("field `prompt`: renders to no tokens".into());
    }
    Ok(ids)
}

/// Reads and normalises every prompt (the walk needs the whole dataset);
/// rows that are not prompts go to the rejects. Returns the prompts (boxed:
/// growing a vector of whole records copied them all, twice over) and where
/// each came from.
#[allow(clippy::vec_box)]
pub(crate) fn read_prompts(cfg: &Config, input: &mut Input) -> Result<(Vec<Box<Record>>, Vec<arl_core::io::Pos>)> {
    let mut prompts = Vec::new();
    let mut positions = Vec::new();
    let mut row = 0u64;
    // The stem of the last source (prompt ids default to `stem:row`).
    let mut stem: Option<(Arc<str>, String)> = None;
    while let Some(batch) = input.next_batch()? {
        for (pos, rec) in batch {
            if stem.as_ref().is_none_or(|(src, _)| !Arc::ptr_eq(src, &pos.source)) {
                stem = Some((pos.source.clone(), arl_core::dataset::stem_of(std::path::Path::new(&*pos.source))));
            }
            let stem = stem.as_ref().map_or("", |(_, s)| s.as_str());
            match arl_core::dataset::to_prompt(rec, row, stem, &cfg.keys) {
                Ok(p) => {
                    prompts.push(Box::new(p));
                    positions.push(pos);
                }
                Err((rec, e)) => input.reject(&pos, &rec, e)?,
            }
            row += 1;
        }
    }
    Ok((prompts, positions))
}

/// The groups to run, in the walk's order (`--batch-size`, `--step`,
/// `--seed`): each prompt's environment and prompt ids, without the groups
/// an earlier run completed (`done`, with `--resume`); a duplicate prompt id,
/// an unknown environment or a prompt that cannot be rendered is rejected.
pub(crate) fn plan_jobs(
    cfg: &Config,
    prompts: &[Box<Record>],
    positions: &[arl_core::io::Pos],
    done: &std::collections::HashSet<String>,
    envs: &env::Envs,
    shared: &Shared,
    input: &mut Input,
) -> Result<Vec<Job>> {
    let order = walk(prompts.len(), cfg.batch_size, cfg.step, cfg.seed);
    let mut jobs = Vec::with_capacity(order.len());
    let mut seen = std::collections::HashSet::with_capacity(order.len());
    for (idx, epoch) in order {
        let prompt = &prompts[idx];
        let id = walked_id(prompt.prompt_id.as_deref().unwrap_or_default(), epoch);
        if done.contains(id.as_ref()) {
            continue;
        }
        let reject = |input: &mut Input, why: String| input.reject(&positions[idx], &selected(prompt, epoch), why);
        if !seen.insert(id.clone()) {
            reject(input, format!("field `prompt_id`: `{id}` appears twice; group keys must be unique"))?;
            continue;
        }
        if cfg.arena {
            match crate::arena::task_game(prompt) {
                Ok(_) => jobs.push(Job::new((idx, epoch), envs.default.clone(), Vec::new())),
                Err(why) => reject(input, why)?,
            }
            continue;
        }
        let env = match envs.pick(prompt).and_then(|e| env::Envs::with_record_tools(e, prompt)) {
            Ok(e) => e,
            Err(why) => {
                reject(input, why)?;
                continue;
            }
        };
        match prompt_ids(prompt, shared, &env, cfg.system.as_deref()) {
            Ok(ids) => jobs.push(Job::new((idx, epoch), env, ids)),
            Err(why) => reject(input, why)?,
        }
    }
    Ok(jobs)
}
