//! One group, run: the `-n` episodes of a prompt, concurrently on one
//! endpoint, or in arena mode the `-n` games of a task; either way the
//! group's records, which are written as one unit.
use crate::arena::{self, Arena};
use crate::client::GenError;
use crate::env;
use crate::episode::{Episode, Shared};
use arl_chat::tokenizer::Tokenizer;
use arl_core::record::Record;
use serde_json::{json, Value};
use std::sync::Arc;

/// A started group: the prompt's record and what it runs with.
pub(crate) struct Group {
    pub(crate) rec: Record,
    pub(crate) prompt_ids: Arc<[u32]>,
    pub(crate) env: Arc<env::Env>,
}

/// The record of sample `i`: the prompt's record with episode `e`'s trajectory.
fn to_record(mut rec: Record, i: u32, e: Episode, tok: &Tokenizer) -> Record {
    rec.sample_index = Some(i);
    rec.response = Some(tok.decode(&e.tokens[e.prompt_len..]));
    rec.prompt_len = Some(e.prompt_len as u32);
    rec.loss_mask = Some(e.loss_mask);
    rec.rollout_log_probs = Some(e.logprobs);
    rec.status = e.status;
    rec.finish_reason = Some(e.finish_reason);
    rec.turns = Some(e.turns);
    rec.tool_calls = Some(e.tool_calls);
    if !e.weight_versions.is_empty() {
        rec.weight_versions = Some(e.weight_versions);
    }
    if e.tool_calls > 0 {
        rec.set_meta("tool_errors", json!(e.tool_errors));
    }
    if let Some(id) = e.env_episode {
        rec.set_meta("episode_id", json!(id));
    }
    rec.tokens = Some(e.tokens);
    rec
}

/// Arena mode: the `n` games of one task, concurrently; their records (seat
/// `x` then `o`, game by game) are written as one unit.
pub(crate) async fn run_games(
    arena: &Arena,
    shared: &Shared,
    opponent: Option<&Shared>,
    job: Group,
    n: u32,
) -> Result<Vec<Record>, GenError> {
    let (game, opening) = arena::task_game(&job.rec).map_err(|e| GenError::Fatal(anyhow::anyhow!(e)))?;
    let seats = [shared, opponent.unwrap_or(shared)];
    let prompt = job.rec.prompt.as_deref();
    let id = job.rec.prompt_id.as_deref().unwrap_or_default();
    let futs = (0..n).map(|i| {
        let trace = shared.tracer.as_deref().map(|t| t.sample(id, i));
        let opening = &opening;
        async move {
            let r = arena::play(arena, seats, game, opening, prompt, trace).await;
            if let Some(t) = trace {
                match &r {
                    Ok(g) => t.end(
                        if g.outcome.is_some() { "completed" } else { "forfeit" },
                        g.episodes.iter().map(|e| e.turns).sum(),
                        g.episodes.iter().map(|e| e.tool_calls).sum(),
                    ),
                    Err(GenError::Cancelled) => t.end("cancelled", 0, 0),
                    Err(GenError::Fatal(_)) => t.end("failed", 0, 0),
                }
            }
            r
        }
    });
    let results = futures::future::join_all(futs).await;
    let (mut xs, mut os) = (Vec::with_capacity(n as usize), Vec::with_capacity(n as usize));
    for (i, r) in results.into_iter().enumerate() {
        let mut pair =
            arena::to_records(&job.rec, game, i as u32, r?, arena, [&seats[0].tokenizer, &seats[1].tokenizer])
                .into_iter();
        xs.extend(pair.next());
        os.extend(pair.next());
    }
    // Seat x's group, then seat o's.
    xs.extend(os);
    Ok(xs)
}

/// The `n` episodes of one prompt, concurrently on one endpoint; their
/// records in sample order.
pub(crate) async fn run_group(shared: &Shared, job: Group, n: u32) -> Result<Vec<Record>, GenError> {
    let ep = shared.client.place();
    let task = job.rec.metadata.clone().map_or(Value::Null, Value::Object);
    let tracer = shared.tracer.as_deref();
    let id = job.rec.prompt_id.as_deref().unwrap_or_default();
    let futs = (0..n).map(|i| {
        let trace = tracer.map(|t| t.sample(id, i));
        shared.run_episode(ep, &job.prompt_ids, &job.env, &task, trace)
    });
    let results = futures::future::join_all(futs).await;
    shared.client.release(ep);
    let mut recs = Vec::with_capacity(n as usize);
    // The prompt's record is copied for each sample but the last, which takes it.
    let mut rec = Some(job.rec);
    for (i, r) in results.into_iter().enumerate() {
        let base = if i + 1 == n as usize { rec.take() } else { rec.clone() };
        recs.push(to_record(base.expect("taken by the last sample only"), i as u32, r?, &shared.tokenizer));
    }
    Ok(recs)
}
