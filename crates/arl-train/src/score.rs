//! Scoring records without training: `arl-train logprobs` (log-probs of
//! each response token under a model) and, through [`annotate`], `arl-train
//! values` (the critic's values).
use super::batch::{score, ScoreOptions};
use super::{sample_of, set_threads, Need, Sample};
use crate::config::{ScoreConfig, TOOL};
use anyhow::{Context, Result};
use arl_core::cli::{self, Input, InputSpec, OutputSpec};
use std::process::ExitCode;
use tch::Kind;

pub fn logprobs(a: &ScoreConfig) -> Result<ExitCode> {
    let device = a.device.resolve(None)?;
    set_threads(a.threads);
    let model = super::load_model(&a.model, device, Kind::Float)?;
    annotate(
        &a.input,
        &a.output,
        |refs| {
            let o = ScoreOptions { temperature: a.temperature, chunk_tokens: a.logprob_chunk_tokens, packed: true };
            score(&model, refs, a.max_tokens_per_micro_batch, &o)
        },
        |r, lp| r.ref_log_probs = Some(lp),
    )
}

/// The streaming body of `arl-train logprobs` and `arl-train values`: reads
/// records batch by batch, rejects those that cannot be scored, computes one
/// number per response token for the rest (`compute`) and stores it (`put`).
pub(crate) fn annotate(
    input: &InputSpec,
    output: &OutputSpec,
    mut compute: impl FnMut(&[&Sample]) -> Vec<Vec<f32>>,
    put: impl Fn(&mut arl_core::record::Record, Vec<f32>),
) -> Result<ExitCode> {
    let mut inp = Input::open(input)?;
    let mut out = output.open()?;
    let pb = cli::progress(input.quiet, None, "records");
    while let Some(batch) = inp.next_batch()? {
        let mut keep = vec![];
        let mut samples = vec![];
        for (pos, r) in batch {
            match sample_of(&r, Need::Score) {
                Ok(s) => {
                    samples.push(s);
                    keep.push(r);
                }
                Err(why) => inp.reject(&pos, &r, why)?,
            }
        }
        let refs: Vec<&Sample> = samples.iter().collect();
        for (mut r, x) in keep.into_iter().zip(compute(&refs)) {
            put(&mut r, x);
            out.write_owned(r)?;
            pb.inc(1);
        }
        out.flush()?;
    }
    pb.finish_and_clear();
    let written = out.count();
    out.finish().context("writing output")?;
    inp.finish(TOOL, written)?;
    Ok(ExitCode::SUCCESS)
}
