//! Scoring records without training: `arl-train logprobs` (log-probs of
//! each response token under a model) and, through [`annotate`], `arl-train
//! values` (the critic's values).
use super::batch::{score, ScoreOptions};
use super::{sample_of, set_threads, Need, Sample};
use crate::config::{ScoreConfig, TOOL};
use anyhow::Result;
use arl_core::cli::{self, InputSpec, OutputSpec};
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
            let o = ScoreOptions {
                temperature: a.temperature,
                chunk_tokens: a.logprob_chunk_tokens,
                batching: a.batching(),
            };
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
    cli::map_record_batches(TOOL, input, output, |batch| {
        let samples: Vec<Result<Sample, String>> = batch.iter().map(|(_, r)| sample_of(r, Need::Score)).collect();
        let refs: Vec<&Sample> = samples.iter().filter_map(|s| s.as_ref().ok()).collect();
        let mut computed = compute(&refs).into_iter();
        batch
            .iter_mut()
            .zip(samples)
            .map(|((_, r), s)| {
                s.map(|_| {
                    put(r, computed.next().expect("one result per scored record"));
                    true
                })
            })
            .collect()
    })
}
