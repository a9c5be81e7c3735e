//! The training run of `arl-train` (one process, or one rank of a
//! data-parallel job): load and check the records, prepare the old-policy and
//! reference log-probs, resume, then step through the epochs, writing metrics
//! and atomic checkpoints; and `arl-train init`. The step itself is in
//! `step`, batching in `batch`, the resume state in `checkpoint`.
use super::batch::{score_shared, ScoreOptions};
use super::checkpoint::{self, plan_fingerprint, InputPosition, TrainerState};
use super::critic::CriticTrainer;
use super::micro::{shard_groups, Batching};
use super::optim::{lr_at, AdamW, AdamWConfig};
use super::step::{train_step, DataParallel};
use super::{sample_of, set_threads, Need, Sample};
use crate::config::{InitConfig, LossKind, MergeConfig, Precision, TrainConfig, TOOL};
use anyhow::{Context, Result};
use arl_chat::template::ChatTemplate;
use arl_chat::tokenizer::Tokenizer;
use arl_core::cli::{self, Input, InputSpec};
use arl_core::record::Record;
use arl_dist::{grads::GradSync, zero::Zero, Collective, ReduceOp};
use arl_model::{amp::AmpDtype, weights, Model, ModelConfig, SaveOptions};
use rayon::prelude::*;
use serde_json::{json, Value};
use std::io::Write;
use std::process::ExitCode;
use std::time::Instant;
use tch::{Device, Kind, Tensor};

fn peak_rss_bytes() -> u64 {
    // SAFETY: getrusage fills the struct it is given.
    let mut u: libc::rusage = unsafe { std::mem::zeroed() };
    if unsafe { libc::getrusage(libc::RUSAGE_SELF, &mut u) } == 0 {
        u.ru_maxrss as u64 * 1024
    } else {
        0
    }
}

struct Loaded {
    samples: Vec<Sample>,
    records: usize,
}

fn load_samples(
    args: &TrainConfig,
    input: &InputSpec,
    tok: Option<&(Tokenizer, Result<ChatTemplate, String>)>,
) -> Result<(Loaded, Input)> {
    let mut inp = Input::open(input)?;
    let need = if args.loss == LossKind::Sft { Need::Sft } else { Need::Rl };
    let convert = |r: &Record| {
        let res = if r.tokens.is_none() && r.messages.is_some() && need == Need::Sft {
            super::chat_render::render_record(r, tok).and_then(|t| sample_of(&t, need))
        } else {
            sample_of(r, need)
        };
        // PPO's critic reads `returns` (and `values`) too.
        res.and_then(|s| match args.critic.train {
            true => super::critic::check_sample(&s, args.critic.value_clip).map(|()| s),
            false => Ok(s),
        })
    };
    // Records are converted on the trainer's threads (rendering and
    // tokenizing `messages` is most of an SFT run's start: 153,600 of the
    // demo's took 8 s on one core), a batch of the reader at a time, in order.
    let threads = usize::try_from(tch::get_num_threads()).unwrap_or(1).max(1);
    let pool = rayon::ThreadPoolBuilder::new().num_threads(threads).build().context("starting threads")?;
    let mut samples = vec![];
    let mut records = 0;
    while let Some(batch) = inp.next_batch()? {
        let converted: Vec<Result<Sample, String>> =
            pool.install(|| batch.par_iter().map(|(_, r)| convert(r)).collect());
        for ((pos, r), res) in batch.iter().zip(converted) {
            records += 1;
            match res {
                Ok(s) => samples.push(s),
                Err(why) => inp.reject(pos, r, why)?,
            }
        }
    }
    Ok((Loaded { samples, records }, inp))
}

/// `arl-train`'s training run, as one process or as one rank of a
/// data-parallel job (under `mpirun`): an error on any rank ends the job.
pub fn train(args: &TrainConfig) -> Result<ExitCode> {
    let comm = arl_dist::connect(args.nproc, args.collective_timeout, TOOL)?;
    if comm.size() == 1 {
        return train_on(args, &*comm);
    }
    match train_on(args, &*comm) {
        Ok(code) => Ok(code),
        Err(e) => {
            cli::report(&format!("{TOOL} (rank {})", comm.rank()), &e);
            comm.abort(i32::from(cli::exit_code_of(&e)))
        }
    }
}

/// This rank's device and libtorch threads (the ranks of one machine share
/// its cores), and the dtype the weights train in.
fn placement(args: &TrainConfig, world: usize) -> Result<(Device, Kind)> {
    let placement = arl_dist::mpirun_placement().filter(|_| world > 1);
    // `cuda` is one GPU per rank of this machine.
    let device = args.device.resolve(placement.map(|p| p.local_rank))?;
    match placement {
        Some(p) if args.threads == 0 => {
            let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
            set_threads((cores / p.local_size.max(1)).max(1))
        }
        _ => set_threads(args.threads),
    }
    let kind = match (args.precision, device) {
        (Precision::Bf16, _) | (Precision::Auto, Device::Cuda(_)) => Kind::BFloat16,
        _ => Kind::Float,
    };
    Ok((device, kind))
}

/// bf16 matrix multiplies must be this much faster than float32 for
/// `--precision auto` to train under bf16 autocast on the CPU.
const AMP_MARGIN: f64 = 1.5;

/// `--precision` as it runs: `auto` is bf16 on CUDA and, on the CPU, `amp`
/// (float32 weights and optimizer state, matrix multiplies in bf16) where a
/// bf16 multiply at the model's training shape measures [`AMP_MARGIN`]× the
/// float32 one (CPUs with bf16 matrix units), else `fp32`; one rank of
/// several does not measure (the ranks must agree): `fp32`. Logged.
fn resolve_precision(p: Precision, model: &Model, world: usize) -> Precision {
    if p != Precision::Auto {
        return p;
    }
    if model.device() != Device::Cpu {
        return Precision::Bf16;
    }
    if world > 1 {
        eprintln!("{TOOL}: precision auto: fp32 (not measured with several ranks; --precision to choose)");
        return Precision::Fp32;
    }
    let (k, n) = (model.config.hidden_size as i64, model.config.intermediate_size as i64);
    let rate = |kind: Kind| {
        tch::no_grad(|| {
            let x = Tensor::randn([2048, k], (kind, Device::Cpu));
            let w = Tensor::randn([n, k], (kind, Device::Cpu));
            drop(x.linear::<Tensor>(&w, None));
            let best = (0..3)
                .map(|_| {
                    let t0 = std::time::Instant::now();
                    drop(x.linear::<Tensor>(&w, None));
                    t0.elapsed().as_secs_f64()
                })
                .fold(f64::INFINITY, f64::min);
            2.0 * (2048 * k * n) as f64 / best / 1e12
        })
    };
    let (fp32, bf16) = (rate(Kind::Float), rate(Kind::BFloat16));
    let pick = if bf16 >= AMP_MARGIN * fp32 { Precision::Amp } else { Precision::Fp32 };
    eprintln!(
        "{TOOL}: precision auto: {} (measured at [2048×{k}]·[{k}×{n}]: float32 {fp32:.2} TFLOP/s, bf16 {bf16:.2}; \
         --precision to choose)",
        if pick == Precision::Amp { "amp (bf16 matrix multiplies, float32 weights)" } else { "fp32" }
    );
    pick
}

/// Fills in the reference log-probs (`--kl-loss-coef` over records without
/// `ref_log_probs`) and the old policy's (`--recompute-old-logprobs`, before
/// any update), the ranks sharing the scoring; and checks that every record
/// has what the RL loss reads.
fn prepare_log_probs(
    args: &TrainConfig,
    model: &Model,
    samples: &mut [Sample],
    comm: &dyn Collective,
    amp: Option<AmpDtype>,
) -> Result<()> {
    let budget = args.max_tokens_per_micro_batch;
    let scoring = ScoreOptions {
        temperature: args.temperature,
        chunk_tokens: args.logprob_chunk_tokens,
        batching: args.batching(),
    };
    if args.kl_loss_coef != 0.0 && samples.iter().any(|s| s.ref_log_probs.is_none()) {
        let Some(ref_dir) = &args.ref_model else {
            return Err(cli::hint(
                cli::usage("`--kl-loss-coef` needs `ref_log_probs` in every record or `--ref-model DIR`"),
                "add `--ref-model` (the initial policy), or run `arl-train logprobs --model REF` first",
            ));
        };
        let mut reference = super::load_model(ref_dir, model.device(), model.kind())?;
        reference.set_amp(amp)?;
        let refs: Vec<&Sample> = samples.iter().collect();
        let lps = score_shared(&reference, &refs, budget, &scoring, comm);
        for (s, lp) in samples.iter_mut().zip(lps) {
            s.ref_log_probs = Some(lp);
        }
    }
    if args.recompute_old_logprobs {
        let all: Vec<&Sample> = samples.iter().collect();
        let lps = score_shared(model, &all, budget, &scoring, comm);
        for (s, lp) in samples.iter_mut().zip(lps) {
            s.old_log_probs = Some(lp);
        }
    } else if samples.iter().any(|s| s.rollout_log_probs.is_none()) {
        return Err(cli::hint(
            cli::data("a record has no `rollout_log_probs` to use as the old policy"),
            "add `--recompute-old-logprobs`",
        ));
    }
    if args.tis_clip.is_some() && samples.iter().any(|s| s.rollout_log_probs.is_none()) {
        return Err(cli::data("`--tis-clip` needs `rollout_log_probs` in every record"));
    }
    Ok(())
}

/// The batches of a run: `gbs` samples a step, and where it starts (step 0,
/// or with `--resume` the checkpoint's step and, over the same input a
/// mid-run checkpoint was saved from, the batches already trained).
struct Plan {
    samples: usize,
    gbs: usize,
    steps_per_epoch: u64,
    fingerprint: String,
    start_step: u64,
    /// (epoch, batches of it) already trained.
    skip: Option<(u64, u64)>,
    /// Steps this run trains.
    steps: u64,
    decay_steps: u64,
}

impl Plan {
    /// Plans the run; with `--resume`, loads the optimizer state into `opt`.
    fn new(args: &TrainConfig, samples: &[Sample], opt: &mut AdamW, announce: bool) -> Result<Plan> {
        let n = samples.len();
        let gbs = args.global_batch_size.unwrap_or(n).min(n);
        let steps_per_epoch = n.div_ceil(gbs) as u64;
        let all = steps_per_epoch * args.epochs;
        let fingerprint = plan_fingerprint(samples, gbs, args.epochs, args.shuffle, args.seed);
        let (mut start_step, mut skip, mut resumed_decay) = (0, None, None);
        if args.resume {
            let st = TrainerState::resume(&args.model, opt)?;
            start_step = st.step;
            if let Some(pos) = st.input.filter(|p| p.fingerprint == fingerprint && !p.complete) {
                if announce {
                    eprintln!(
                        "{TOOL}: resuming the same input at epoch {}, batch {} (step {}); {} of {all} batches done",
                        pos.epoch + 1,
                        pos.batches + 1,
                        st.step + 1,
                        pos.epoch * steps_per_epoch + pos.batches,
                    );
                }
                skip = Some((pos.epoch, pos.batches));
                resumed_decay = Some(st.lr_decay_steps);
            }
        }
        let done_before = skip.map_or(0, |(e, b)| e * steps_per_epoch + b);
        let steps = all - done_before.min(all);
        let decay_steps = args.lr_decay_steps.or(resumed_decay).unwrap_or(start_step + steps);
        Ok(Plan { samples: n, gbs, steps_per_epoch, fingerprint, start_step, skip, steps, decay_steps })
    }

    /// Whether batch `b` of `epoch` was trained before the resumed checkpoint.
    fn skipped(&self, epoch: u64, b: u64) -> bool {
        self.skip.is_some_and(|(e, k)| epoch < e || (epoch == e && b < k))
    }

    /// The input position to record in a checkpoint.
    fn position(&self, epoch: u64, batches: u64, complete: bool) -> InputPosition {
        InputPosition { fingerprint: self.fingerprint.clone(), samples: self.samples, epoch, batches, complete }
    }
}

/// Writes checkpoints (`--save`): rank 0 writes, the other ranks wait for it.
struct Saver<'a> {
    args: &'a TrainConfig,
    comm: &'a dyn Collective,
    /// A sharded optimizer's collectives: every rank takes part in gathering its state.
    zero: Option<&'a Zero>,
    opts: SaveOptions,
    decay_steps: u64,
}

impl Saver<'_> {
    fn save(&self, model: &Model, opt: &AdamW, step: u64, pos: InputPosition) -> Result<()> {
        let args = self.args;
        let Some(dest) = &args.save else { return Ok(()) };
        let opt_state = opt.state(self.zero.map(|z| (self.comm, z)))?;
        if let Some(opt_state) = opt_state.filter(|_| self.comm.rank() == 0) {
            let state = TrainerState {
                step,
                lr: args.lr,
                min_lr: args.min_lr,
                lr_warmup_steps: args.lr_warmup_steps,
                lr_decay_steps: self.decay_steps,
                lr_schedule: args.lr_schedule,
                seed: args.seed,
                input: Some(pos),
            };
            checkpoint::save(model, dest, &self.opts, &args.model, |dir| state.write(dir, &opt_state))?;
            if args.keep_last > 0 {
                checkpoint::prune(dest, args.keep_last)?;
            }
        }
        self.comm.barrier("wait for rank 0 to write the checkpoint");
        Ok(())
    }
}

/// `--metrics FILE`, opened for appending on rank 0.
fn open_metrics(args: &TrainConfig, rank: usize) -> Result<Option<std::fs::File>> {
    let Some(p) = args.metrics.as_ref().filter(|_| rank == 0) else { return Ok(None) };
    let f = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(p)
        .with_context(|| format!("cannot open metrics file `{}`", p.display()))?;
    Ok(Some(f))
}

/// The run on this rank: checks, the records, the policy (and PPO's critic)
/// with its optimizer, the log-probs the loss needs, then every step of the
/// plan, saving at `--save-interval` and at the end.
fn train_on(args: &TrainConfig, comm: &dyn Collective) -> Result<ExitCode> {
    check_zero_stage(args, comm)?;
    let (rank, world) = (comm.rank(), comm.size());
    let (device, kind) = placement(args, world)?;
    tch::manual_seed(args.seed as i64);
    let tok = super::chat_render::tokenizer_of(&args.model)?;
    // Under a launcher only rank 0 has stdin: it shares what it read.
    let (input, _input_copy) = arl_dist::shared_input(comm, &args.input)?;
    let (loaded, inp) = load_samples(args, &input, tok.as_ref())?;
    let mut samples = loaded.samples;
    if samples.is_empty() {
        inp.finish(TOOL, 0)?;
        return Err(cli::data(format!("no trainable records ({} read)", loaded.records)));
    }
    let mut model = load_policy(args, device, kind)?;
    let precision = resolve_precision(args.precision, &model, world);
    // `--precision amp`: float32 weights, forwards under bf16 autocast.
    let amp = matches!(precision, Precision::Amp).then_some(AmpDtype::Bf16);
    model.set_amp(amp)?;
    let dp = data_parallel(args, &model, comm);
    if args.loss == LossKind::Rl {
        prepare_log_probs(args, &model, &mut samples, comm, amp)?;
    }
    let adam = AdamWConfig {
        beta1: args.adam_beta1,
        beta2: args.adam_beta2,
        eps: args.adam_eps,
        weight_decay: args.weight_decay,
    };
    // PPO's critic (`--train-critic`): its own AdamW, one step per policy step
    // on the same global batch, saved before the policy.
    let critic = match args.critic.train {
        true => Some(CriticTrainer::new(
            &args.critic,
            &args.model,
            adam,
            args.clip_grad,
            args.max_tokens_per_micro_batch,
            args.batching(),
            device,
            kind,
        )?),
        false => None,
    };
    let mut opt = match dp.as_ref().and_then(|d| d.zero.as_ref()) {
        Some(z) => AdamW::sharded(model.trainable_parameters(), adam, &z.owned()),
        None => AdamW::new(model.trainable_parameters(), adam),
    };
    let plan = Plan::new(args, &samples, &mut opt, rank == 0 && !args.input.quiet)?;
    let save_kind = match args.save_dtype {
        None => model.config.dtype_name().map(weights::parse_kind).transpose()?.unwrap_or(Kind::Float),
        Some(k) => k,
    };
    let saver = Saver {
        args,
        comm,
        zero: dp.as_ref().and_then(|d| d.zero.as_ref()),
        opts: SaveOptions { kind: save_kind, max_shard_bytes: args.max_shard_bytes },
        decay_steps: plan.decay_steps,
    };
    let metrics = open_metrics(args, rank)?;
    let lens: Vec<usize> = samples.iter().map(|s| s.tokens.len()).collect();
    let pb = cli::progress(args.input.quiet || rank != 0, Some(plan.steps), "steps");
    if let Some(d) = &dp {
        d.sync.define_grads();
    }
    // Optimizer state per rank (the largest, sharded); rank 0 reports it.
    let mut opt_bytes = [opt.state_bytes() as f64];
    comm.all_reduce_f64(&mut opt_bytes, ReduceOp::Max, "the optimizer state's size");
    let mut t = Trainer {
        args,
        comm,
        dp: dp.as_ref(),
        samples: &samples,
        lens: &lens,
        model,
        opt,
        critic,
        metrics,
        opt_bytes: opt_bytes[0],
        precision,
    };
    let mut rng = arl_core::rng::Rng::new(args.seed);
    let mut step = plan.start_step;
    let mut end = plan.position(args.epochs, 0, true);
    'epochs: for epoch in 0..args.epochs {
        // Shuffled every epoch, skipped ones too, so a resumed run sees the
        // order the interrupted one would have.
        let mut order: Vec<usize> = (0..samples.len()).collect();
        if args.shuffle {
            rng.shuffle(&mut order);
        }
        for (b, chunk) in order.chunks(plan.gbs).enumerate() {
            if plan.skipped(epoch, b as u64) {
                continue;
            }
            let loss = t.step(step, epoch, chunk, plan.decay_steps)?;
            step += 1;
            pb.inc(1);
            pb.set_message(format!("loss {loss:.4}"));
            let (e, k) = if b + 1 == plan.steps_per_epoch as usize { (epoch + 1, 0) } else { (epoch, b as u64 + 1) };
            let last = step == plan.start_step + plan.steps;
            if args.max_steps.is_some_and(|m| step - plan.start_step >= m) && !last {
                end = plan.position(e, k, false);
                break 'epochs;
            }
            if args.save_interval > 0 && step % args.save_interval == 0 && !last {
                saver.save(&t.model, &t.opt, step, plan.position(e, k, false))?;
            }
        }
    }
    pb.finish_and_clear();
    if let Some(c) = &t.critic {
        c.save(&saver.opts, &args.model)?;
    }
    saver.save(&t.model, &t.opt, step, end)?;
    inp.finish(TOOL, 0)?;
    Ok(ExitCode::SUCCESS)
}

/// `--zero-stage` needs several ranks, and an engine that can shard.
fn check_zero_stage(args: &TrainConfig, comm: &dyn Collective) -> Result<()> {
    if args.zero_stage > 0 && comm.size() == 1 {
        return Err(cli::hint(
            cli::usage(format!(
                "`--zero-stage {}` shards the optimizer state over ranks, but this job has one rank",
                args.zero_stage
            )),
            "start 2 or more ranks (`--nproc N`, or `mpirun -n N arl-train …`), or drop `--zero-stage`",
        ));
    }
    if args.zero_stage > 0 && !comm.can_shard() {
        return Err(cli::usage(format!(
            "`--zero-stage {}`: the {} engine has no all-gather / reduce-scatter",
            args.zero_stage,
            comm.engine()
        )));
    }
    Ok(())
}

/// With several ranks: every rank starts from rank 0's weights; gradients
/// are summed in buckets (and with `--zero-stage`, the optimizer sharded).
fn data_parallel<'a>(args: &TrainConfig, model: &Model, comm: &'a dyn Collective) -> Option<DataParallel<'a>> {
    let (rank, world) = (comm.rank(), comm.size());
    let bucket_bytes = (args.allreduce_bucket_mb * (1 << 20) as f64).max(4.0) as usize;
    (world > 1).then(|| {
        let sync = GradSync::new(model.trainable_parameters().into_values().collect(), bucket_bytes);
        sync.broadcast_params(comm);
        let zero = (args.zero_stage > 0)
            .then(|| Zero::new(model.trainable_parameters().into_values().collect(), world, rank, bucket_bytes));
        DataParallel { comm, sync, zero }
    })
}

/// What the steps of a run work on: the policy and its optimizer, PPO's
/// critic, the metrics file, and the samples every step draws from.
struct Trainer<'a> {
    args: &'a TrainConfig,
    comm: &'a dyn Collective,
    dp: Option<&'a DataParallel<'a>>,
    samples: &'a [Sample],
    /// Each sample's token count.
    lens: &'a [usize],
    model: Model,
    opt: AdamW,
    critic: Option<CriticTrainer>,
    metrics: Option<std::fs::File>,
    /// The optimizer state's size on the rank with the most.
    opt_bytes: f64,
    /// `--precision` as it runs (`auto` resolved), in the metrics.
    precision: Precision,
}

impl Trainer<'_> {
    /// Trains one step on the global batch `chunk` of `epoch`, `step` steps
    /// done before it, and writes its metrics line; returns its loss per
    /// token.
    fn step(&mut self, step: u64, epoch: u64, chunk: &[usize], decay_steps: u64) -> Result<f64> {
        let (args, comm) = (self.args, self.comm);
        let (rank, world) = (comm.rank(), comm.size());
        let t0 = Instant::now();
        let lr = lr_at(step, args.lr, args.min_lr, args.lr_warmup_steps, decay_steps, args.lr_schedule);
        // This rank's token-balanced share of the global batch.
        let mine = match args.batching() {
            Batching::SharedPrefix => shard_groups(chunk, |i| &self.samples[i], world),
            _ => arl_dist::shard(chunk, self.lens, world),
        }
        .swap_remove(rank);
        // LoRA dropout draws from libtorch's generator, seeded per step:
        // a resumed run draws the masks the uninterrupted one draws.
        if self.model.lora_config().is_some_and(|l| l.dropout > 0.0) {
            tch::manual_seed((args.seed.wrapping_mul(0x9e37_79b9_7f4a_7c15) ^ step) as i64);
        }
        let (grad_norm, s) =
            train_step(&mut self.model, &mut self.opt, args, self.samples, &mine, self.lens, lr, self.dp)?;
        let step = step + 1;
        let secs = t0.elapsed().as_secs_f64();
        let tk = s.tokens.max(1.0);
        let mut m = json!({
            "step": step, "epoch": epoch, "samples": chunk.len(), "tokens": s.all_tokens,
            "trained_tokens": s.tokens, "loss": s.loss / tk, "lr": lr, "grad_norm": grad_norm,
            "entropy": s.entropy / tk, "tokens_per_s": s.all_tokens as f64 / secs, "step_time_s": secs,
            "peak_rss_bytes": peak_rss_bytes(), "world_size": world,
            "optimizer_state_bytes": self.opt_bytes, "zero_stage": args.zero_stage,
            "precision": self.precision.name(),
        });
        s.add_metrics(&mut m, args, world);
        if let Some(peak) = arl_model::device::memory_peak(self.model.device()) {
            m["peak_gpu_allocated_bytes"] = json!(peak.allocated);
            m["peak_gpu_reserved_bytes"] = json!(peak.reserved);
        }
        if world > 1 {
            // Every rank's peak, in rank order.
            let mut rss = vec![0.0; world];
            rss[rank] = peak_rss_bytes() as f64;
            comm.all_reduce_f64(&mut rss, ReduceOp::Sum, "all-reduce of the ranks' peak memory");
            m["rank_peak_rss_bytes"] = json!(rss);
        }
        if let Some(c) = self.critic.as_mut() {
            for (k, v) in c.step(self.samples, chunk, self.lens)?.as_object().expect("object") {
                m[k] = v.clone();
            }
        }
        if let Some(f) = self.metrics.as_mut() {
            writeln!(f, "{m}").context("writing metrics")?;
            f.flush()?;
        }
        Ok(s.loss / tk)
    }
}

/// `--model`, with the adapter `--lora-rank` asks for attached (a fresh one,
/// or the one `--model` holds, which must then agree with the flags).
fn load_policy(args: &TrainConfig, device: Device, kind: Kind) -> Result<Model> {
    let mut model = super::load_model(&args.model, device, kind)?;
    if let Some(want) = &args.lora {
        match model.lora_config() {
            None => model.add_lora(want)?,
            Some(have) if have.rank != want.rank || have.targets != want.targets || have.alpha != want.alpha => {
                return Err(cli::usage(format!(
                    "`{}` holds an adapter of rank {}, alpha {}, targets {}; the flags ask for rank {}, alpha {}, \
                     targets {} (drop the --lora-* flags to continue the adapter as it is)",
                    args.model.display(),
                    have.rank,
                    have.alpha,
                    have.targets.join(","),
                    want.rank,
                    want.alpha,
                    want.targets.join(",")
                )))
            }
            Some(_) => {}
        }
    }
    Ok(model)
}

/// `arl-train merge`.
pub fn merge(a: &MergeConfig) -> Result<ExitCode> {
    let base = match &a.base {
        Some(b) => b.clone(),
        None => arl_model::lora::base_of(&a.adapter).map_err(|e| cli::data(format!("{e:#}")))?,
    };
    let mut model = Model::load(&base, Device::Cpu, Kind::Float)?;
    model.load_lora(&a.adapter).map_err(|e| cli::data(format!("{e:#}")))?;
    model.merge_lora()?;
    let kind = match a.dtype {
        Some(k) => k,
        None => model.config.dtype_name().map(weights::parse_kind).transpose()?.unwrap_or(Kind::Float),
    };
    checkpoint::save(&model, &a.out, &SaveOptions { kind, ..Default::default() }, &base, |_| Ok(()))?;
    eprintln!(
        "{TOOL} merge: {} (rank {}) + {} -> {}",
        a.adapter.display(),
        arl_model::lora::read_config(&a.adapter)?.0.rank,
        base.display(),
        a.out.display()
    );
    Ok(ExitCode::SUCCESS)
}

pub fn init(a: &InitConfig) -> Result<ExitCode> {
    let mut cfg = ModelConfig::from_file(&a.config)?;
    let tok = Tokenizer::load(&a.tokenizer)?;
    let need = tok.inner.get_vocab_size(true);
    if cfg.vocab_size < need {
        return Err(cli::usage(format!("vocab_size {} is smaller than the tokenizer's {need} tokens", cfg.vocab_size)));
    }
    let id = |key: &str| tok.config_str(key).and_then(|t| tok.token_to_id(&t)).map(|i| Value::from(i as u64));
    if cfg.eos_token_id.is_none() {
        cfg.eos_token_id = id("eos_token");
    }
    if cfg.pad_token_id.is_none() {
        cfg.pad_token_id = id("pad_token");
    }
    if cfg.bos_token_id.is_none() {
        cfg.bos_token_id = id("bos_token");
    }
    let kind = a.dtype;
    if cfg.dtype_name().is_none() {
        cfg.torch_dtype = Some(weights::kind_name(kind).to_string());
    }
    tch::manual_seed(a.seed as i64);
    let model = tch::no_grad(|| Model::new(cfg, Device::Cpu, Kind::Float))?;
    checkpoint::save(&model, &a.out, &SaveOptions { kind, ..Default::default() }, &tok.dir, |_| Ok(()))?;
    Ok(ExitCode::SUCCESS)
}
