//! The training loop, `init` and `logprobs` (feature `torch`).
use super::chat_render::ChatRenderer;
use super::checkpoint;
use super::loss::{self, PolicyLoss};
use super::optim::{lr_at, AdamW, AdamWConfig};
use super::{pack, sample_of, Need, Sample};
use crate::cli::{self, Input, InputArgs};
use crate::cmd::train::{InitArgs, LogprobsArgs, LossKind, Precision, TrainArgs};
use crate::dist::{grads::GradSync, Collective};
use crate::model::{token_logprobs, weights, Model, ModelConfig, SaveOptions};
use crate::record::Record;
use crate::tokenizer::Tokenizer;
use anyhow::{Context, Result};
use serde_json::{json, Value};
use std::io::Write;
use std::process::ExitCode;
use std::time::Instant;
use tch::{Device, Kind, Tensor};

const TOOL: &str = crate::cmd::train::TOOL;

pub fn parse_device(s: &str) -> Result<Device> {
    let d = match s {
        "cpu" => Device::Cpu,
        "cuda" => Device::Cuda(0),
        _ => match s.strip_prefix("cuda:").and_then(|n| n.parse::<usize>().ok()) {
            Some(n) => Device::Cuda(n),
            None => return Err(cli::usage(format!("`--device {s}`: expected cpu, cuda or cuda:N"))),
        },
    };
    if let Device::Cuda(n) = d {
        if !tch::Cuda::is_available() || n >= tch::Cuda::device_count() as usize {
            return Err(cli::usage(format!(
                "`--device {s}`: no such CUDA device (found {})",
                tch::Cuda::device_count()
            )));
        }
    }
    Ok(d)
}

pub fn set_threads(n: usize) {
    let n = if n == 0 { std::thread::available_parallelism().map_or(1, |n| n.get()) } else { n };
    tch::set_num_threads(n as i32);
}

fn parse_size(s: &str) -> Result<u64> {
    let t = s.trim().to_ascii_uppercase();
    let (num, mul) = if let Some(x) = t.strip_suffix("GB") {
        (x, 1u64 << 30)
    } else if let Some(x) = t.strip_suffix("MB") {
        (x, 1 << 20)
    } else if let Some(x) = t.strip_suffix("KB") {
        (x, 1 << 10)
    } else {
        (t.as_str(), 1)
    };
    let v: f64 = num.trim().parse().map_err(|_| cli::usage(format!("`{s}`: expected a size like 5GB or 500MB")))?;
    Ok((v * mul as f64) as u64)
}

/// A padded micro-batch on the device; response-aligned tensors are [B, T−1]
/// (position p predicts token p+1).
struct Batch {
    ids: Tensor,
    attn: Tensor,
    mask: Tensor,
    adv: Tensor,
    old: Option<Tensor>,
    rollout: Option<Tensor>,
    reference: Option<Tensor>,
    /// Non-pad tokens, for tokens/s.
    tokens: usize,
    t: usize,
}

fn dense(samples: &[&Sample], t: usize, get: impl Fn(&Sample) -> Option<&[f32]>) -> Option<Vec<f32>> {
    let mut out = vec![0f32; samples.len() * (t - 1)];
    for (b, s) in samples.iter().enumerate() {
        let v = get(s)?;
        let base = b * (t - 1) + s.prompt_len - 1;
        out[base..base + v.len()].copy_from_slice(v);
    }
    Some(out)
}

fn make_batch(samples: &[&Sample], device: Device) -> Batch {
    let t = samples.iter().map(|s| s.tokens.len()).max().unwrap_or(1).max(2);
    let b = samples.len();
    let mut ids = vec![0i64; b * t];
    let mut attn = vec![0i64; b * t];
    for (i, s) in samples.iter().enumerate() {
        ids[i * t..i * t + s.tokens.len()].copy_from_slice(&s.tokens);
        attn[i * t..i * t + s.tokens.len()].iter_mut().for_each(|x| *x = 1);
    }
    let shape = [b as i64, t as i64 - 1];
    let tensor = |v: Vec<f32>| Tensor::from_slice(&v).view(shape).to_device(device);
    Batch {
        ids: Tensor::from_slice(&ids).view([b as i64, t as i64]).to_device(device),
        attn: Tensor::from_slice(&attn).view([b as i64, t as i64]).to_device(device),
        mask: tensor(dense(samples, t, |s| Some(s.loss_mask.as_slice())).expect("always present")),
        adv: tensor(dense(samples, t, |s| Some(s.advantages.as_slice())).expect("always present")),
        old: dense(samples, t, |s| s.old_log_probs.as_deref().or(s.rollout_log_probs.as_deref())).map(tensor),
        rollout: dense(samples, t, |s| s.rollout_log_probs.as_deref()).map(tensor),
        reference: dense(samples, t, |s| s.ref_log_probs.as_deref()).map(tensor),
        tokens: samples.iter().map(|s| s.tokens.len()).sum(),
        t,
    }
}

/// Log-probs [B, T−1] of each next token.
fn batch_logprobs(model: &Model, batch: &Batch, temperature: f64) -> Tensor {
    let t = batch.t as i64;
    let logits = model.forward(&batch.ids, Some(&batch.attn)).narrow(1, 0, t - 1);
    token_logprobs(&logits, &batch.ids.narrow(1, 1, t - 1), temperature)
}

/// Response-token log-probs of every sample under `model` (no gradient).
fn score(model: &Model, samples: &[&Sample], budget: usize, temperature: f64) -> Vec<Vec<f32>> {
    let lens: Vec<usize> = samples.iter().map(|s| s.tokens.len()).collect();
    let order: Vec<usize> = (0..samples.len()).collect();
    let mut out = vec![vec![]; samples.len()];
    tch::no_grad(|| {
        for mb in pack(&order, &lens, budget) {
            let group: Vec<&Sample> = mb.iter().map(|&i| samples[i]).collect();
            let batch = make_batch(&group, model.device());
            let lp = batch_logprobs(model, &batch, temperature);
            let lp = lp.to_device(Device::Cpu);
            for (b, &i) in mb.iter().enumerate() {
                let s = samples[i];
                let row = lp.get(b as i64).narrow(0, s.prompt_len as i64 - 1, s.response_len() as i64);
                out[i] = Vec::<f32>::try_from(&row).unwrap_or_default();
            }
        }
    });
    out
}

/// [`score`] with the samples split among the ranks of `comm`; every rank
/// gets every sample's log-probs (each rank fills its own, zeros elsewhere,
/// then one all-reduce sums them: exact).
fn score_shared(
    model: &Model,
    samples: &[&Sample],
    budget: usize,
    temperature: f64,
    comm: &dyn Collective,
) -> Vec<Vec<f32>> {
    if comm.size() == 1 {
        return score(model, samples, budget, temperature);
    }
    let lens: Vec<usize> = samples.iter().map(|s| s.tokens.len()).collect();
    let all: Vec<usize> = (0..samples.len()).collect();
    let mine = crate::dist::shard(&all, &lens, comm.size()).swap_remove(comm.rank());
    let group: Vec<&Sample> = mine.iter().map(|&i| samples[i]).collect();
    let lps = score(model, &group, budget, temperature);
    let mut offsets = Vec::with_capacity(samples.len() + 1);
    offsets.push(0);
    for s in samples {
        offsets.push(offsets.last().unwrap() + s.response_len());
    }
    let mut flat = vec![0f32; *offsets.last().unwrap()];
    for (&i, lp) in mine.iter().zip(lps) {
        flat[offsets[i]..offsets[i] + lp.len()].copy_from_slice(&lp);
    }
    comm.all_reduce_sum_f32(&mut flat, "all-reduce of the scored log-probs");
    (0..samples.len()).map(|i| flat[offsets[i]..offsets[i + 1]].to_vec()).collect()
}

/// Sums of per-token metrics over a step (divided by tokens at the end).
#[derive(Default)]
struct StepStats {
    loss: f64,
    pg_loss: f64,
    kl_loss: f64,
    entropy: f64,
    clipped: f64,
    approx_kl: f64,
    ratio_min: f64,
    ratio_max: f64,
    tis: f64,
    mismatch_k3: f64,
    mismatch_max: f64,
    mismatch_tokens: f64,
    opsm_dropped: f64,
    tokens: f64,
    all_tokens: usize,
    /// Seconds in the gradient all-reduce (data parallel).
    allreduce_s: f64,
}

fn masked_sum(x: &Tensor, mask: &Tensor) -> f64 {
    (x.detach() * mask).sum(Kind::Float).double_value(&[])
}

fn masked_minmax(x: &Tensor, mask: &Tensor) -> (f64, f64) {
    let sel = x.detach().masked_select(&mask.gt(0.0));
    if sel.numel() == 0 {
        return (f64::NAN, f64::NAN);
    }
    (sel.min().double_value(&[]), sel.max().double_value(&[]))
}

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
    args: &TrainArgs,
    input: &InputArgs,
    tok: Option<&(Tokenizer, ChatRenderer)>,
) -> Result<(Loaded, Input)> {
    let mut inp = Input::open(input)?;
    let need = if args.loss == LossKind::Sft { Need::Sft } else { Need::Rl };
    let mut samples = vec![];
    let mut records = 0;
    for (pos, r) in inp.read_all()? {
        records += 1;
        let res = if r.tokens.is_none() && r.messages.is_some() && need == Need::Sft {
            sample_of_messages(&r, tok)
        } else {
            sample_of(&r, need)
        };
        // PPO's critic reads `returns` (and `values`) too.
        let res = res.and_then(|s| match args.critic.train_critic {
            true => super::critic::check_sample(&s, args.critic.value_clip).map(|()| s),
            false => Ok(s),
        });
        match res {
            Ok(s) => samples.push(s),
            Err(why) => inp.reject(&pos, &r, why)?,
        }
    }
    Ok((Loaded { samples, records }, inp))
}

fn sample_of_messages(r: &Record, tok: Option<&(Tokenizer, ChatRenderer)>) -> Result<Sample, String> {
    let (tok, renderer) = tok.ok_or("field `messages`: the model has no tokenizer to render them")?;
    let msgs =
        r.messages.as_ref().and_then(Value::as_array).ok_or("field `messages`: expected a list of chat messages")?;
    let tools = r.metadata.as_ref().and_then(|m| m.get("tools"));
    let rd = renderer.tokenize(tok, msgs, tools).map_err(|e| format!("field `messages`: {e:#}"))?;
    let first = rd.trained.iter().position(|&x| x).ok_or("field `messages`: no assistant tokens")?.max(1);
    Ok(Sample {
        tokens: rd.ids.iter().map(|&t| i64::from(t)).collect(),
        prompt_len: first,
        loss_mask: rd.trained[first..].iter().map(|&x| if x { 1.0 } else { 0.0 }).collect(),
        advantages: vec![0.0; rd.ids.len() - first],
        rollout_log_probs: None,
        ref_log_probs: None,
        old_log_probs: None,
        values: None,
        returns: None,
    })
}

#[derive(serde::Serialize, serde::Deserialize)]
struct TrainerState {
    step: u64,
    lr: f64,
    min_lr: f64,
    lr_warmup_steps: u64,
    lr_decay_steps: u64,
    lr_schedule: super::options::Schedule,
    seed: u64,
    /// Where in its input the run stood (absent in checkpoints of older versions).
    #[serde(default)]
    input: Option<InputPosition>,
}

/// How far a run got through its input, so that `--resume` over the same
/// input (same records, batch size, epochs, shuffle, seed) continues with the
/// next batch instead of training the first ones again.
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
struct InputPosition {
    /// Hash of the training plan: the samples' tokens, masks and advantages,
    /// the global batch size, epochs, shuffle and seed.
    fingerprint: String,
    samples: usize,
    /// Epoch and batches of it already trained.
    epoch: u64,
    batches: u64,
    /// The whole input was trained (a checkpoint written at the end).
    complete: bool,
}

/// FNV-1a over what decides the batches a run trains, in order.
fn plan_fingerprint(samples: &[Sample], gbs: usize, epochs: u64, shuffle: bool, seed: u64) -> String {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    let mut eat = |x: u64| {
        for b in x.to_le_bytes() {
            h ^= u64::from(b);
            h = h.wrapping_mul(0x0100_0000_01b3);
        }
    };
    for v in [samples.len() as u64, gbs as u64, epochs, u64::from(shuffle), seed] {
        eat(v);
    }
    for s in samples {
        eat(s.tokens.len() as u64);
        eat(s.prompt_len as u64);
        s.tokens.iter().for_each(|&t| eat(t as u64));
        s.loss_mask.iter().for_each(|&m| eat(u64::from(m.to_bits())));
        s.advantages.iter().for_each(|&a| eat(u64::from(a.to_bits())));
    }
    format!("{h:016x}")
}

/// `arl-train`'s training run, as one process or as one rank of a
/// data-parallel job (under `mpirun`): an error on any rank ends the job.
pub fn train(args: &TrainArgs) -> Result<ExitCode> {
    let comm = crate::dist::connect(args.nproc, args.collective_timeout, TOOL)?;
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

fn train_on(args: &TrainArgs, comm: &dyn Collective) -> Result<ExitCode> {
    let (rank, world) = (comm.rank(), comm.size());
    let model_dir = args.model.clone().ok_or_else(|| cli::usage("`--model DIR` is required for training"))?;
    if args.eps_clip_c.is_some_and(|c| c <= 1.0) {
        return Err(cli::usage("`--eps-clip-c` must be greater than 1"));
    }
    if args.global_batch_size == Some(0) || args.max_tokens_per_micro_batch == 0 || args.temperature <= 0.0 {
        return Err(cli::usage(
            "`--global-batch-size`, `--max-tokens-per-micro-batch` and `--temperature` must be positive",
        ));
    }
    let placement = crate::dist::mpirun_placement().filter(|_| world > 1);
    let device = match placement {
        // One GPU per rank of this machine.
        Some(p) if args.device == "cuda" => parse_device(&format!("cuda:{}", p.local_rank))?,
        _ => parse_device(&args.device)?,
    };
    match placement {
        // The ranks of one machine share its cores.
        Some(p) if args.threads == 0 => {
            let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
            set_threads((cores / p.local_size.max(1)).max(1))
        }
        _ => set_threads(args.threads),
    }
    tch::manual_seed(args.seed as i64);
    let kind = match (args.precision, device) {
        (Precision::Bf16, _) | (Precision::Auto, Device::Cuda(_)) => Kind::BFloat16,
        _ => Kind::Float,
    };
    let tok = if model_dir.join("tokenizer.json").exists() {
        let t = Tokenizer::load(&model_dir)?;
        let r = ChatRenderer::from_tokenizer(&t).ok();
        r.map(|r| (t, r))
    } else {
        None
    };
    // Under a launcher only rank 0 has stdin: it shares what it read.
    let (input, _input_copy) = crate::dist::shared_input(comm, &args.input)?;
    let (loaded, inp) = load_samples(args, &input, tok.as_ref())?;
    let mut samples = loaded.samples;
    if samples.is_empty() {
        inp.finish(TOOL, 0)?;
        return Err(cli::data(format!("no trainable records ({} read)", loaded.records)));
    }
    let mut model = Model::load(&model_dir, device, kind)?;
    // `--precision amp`: float32 weights, forwards under bf16 autocast.
    let amp = matches!(args.precision, Precision::Amp).then_some(crate::model::amp::AmpDtype::Bf16);
    model.set_amp(amp)?;
    let rl = args.loss == LossKind::Rl;
    // Every rank starts from rank 0's weights; gradients are summed in buckets.
    let sync = (world > 1).then(|| {
        let bytes = (args.allreduce_bucket_mb * (1 << 20) as f64).max(1.0) as usize;
        let s = GradSync::new(model.named_parameters().into_values().collect(), bytes);
        s.broadcast_params(comm);
        s
    });

    // Reference log-probs for the KL loss.
    if rl && args.kl_loss_coef != 0.0 && samples.iter().any(|s| s.ref_log_probs.is_none()) {
        let Some(ref_dir) = &args.ref_model else {
            return Err(cli::hint(
                cli::usage("`--kl-loss-coef` needs `ref_log_probs` in every record or `--ref-model DIR`"),
                "add `--ref-model` (the initial policy), or run `arl-train logprobs --model REF` first",
            ));
        };
        let mut reference = Model::load(ref_dir, device, kind)?;
        reference.set_amp(amp)?;
        let refs: Vec<&Sample> = samples.iter().collect();
        let lps = score_shared(&reference, &refs, args.max_tokens_per_micro_batch, args.temperature, comm);
        for (s, lp) in samples.iter_mut().zip(lps) {
            s.ref_log_probs = Some(lp);
        }
    }
    // Old-policy log-probs: recomputed before any update, or the rollout's.
    if rl && args.recompute_old_logprobs {
        let all: Vec<&Sample> = samples.iter().collect();
        let lps = score_shared(&model, &all, args.max_tokens_per_micro_batch, args.temperature, comm);
        for (s, lp) in samples.iter_mut().zip(lps) {
            s.old_log_probs = Some(lp);
        }
    } else if rl && samples.iter().any(|s| s.rollout_log_probs.is_none()) {
        return Err(cli::hint(
            cli::data("a record has no `rollout_log_probs` to use as the old policy"),
            "add `--recompute-old-logprobs`",
        ));
    }
    if rl && args.tis_clip.is_some() && samples.iter().any(|s| s.rollout_log_probs.is_none()) {
        return Err(cli::data("`--tis-clip` needs `rollout_log_probs` in every record"));
    }

    // PPO's critic (`--train-critic`): its own AdamW, one step per policy step
    // on the same global batch, saved before the policy.
    let mut critic = match args.critic.train_critic {
        true if !rl => return Err(cli::usage("`--train-critic` needs `--loss rl`")),
        // Each rank would fit its own shard and only rank 0's critic be saved.
        true if world > 1 => {
            return Err(cli::usage("`--train-critic` runs in one process only (the critic is not data-parallel yet); drop `--nproc`"))
        }
        true => Some(super::critic::CriticTrainer::new(
            &args.critic,
            &model_dir,
            AdamWConfig {
                beta1: args.adam_beta1,
                beta2: args.adam_beta2,
                eps: args.adam_eps,
                weight_decay: args.weight_decay,
            },
            args.clip_grad,
            args.max_tokens_per_micro_batch,
            device,
            kind,
        )?),
        false => None,
    };

    let n = samples.len();
    let gbs = args.global_batch_size.unwrap_or(n).min(n);
    let steps_per_epoch = n.div_ceil(gbs) as u64;
    let total_new = steps_per_epoch * args.epochs;
    let mut opt = AdamW::new(
        model.named_parameters(),
        AdamWConfig {
            beta1: args.adam_beta1,
            beta2: args.adam_beta2,
            eps: args.adam_eps,
            weight_decay: args.weight_decay,
        },
    );
    let fingerprint = plan_fingerprint(&samples, gbs, args.epochs, args.shuffle, args.seed);
    let mut start_step = 0;
    // With `--resume` over the input a mid-run checkpoint was saved from:
    // (epoch, batches of it) already trained, and the run's own decay length.
    let mut skip: Option<(u64, u64)> = None;
    let mut resumed_decay = None;
    if args.resume {
        let sdir = model_dir.join("trainer_state");
        let text = std::fs::read_to_string(sdir.join("state.json"))
            .with_context(|| format!("`--resume`: `{}` has no trainer state", model_dir.display()))?;
        let st: TrainerState = serde_json::from_str(&text).context("trainer_state/state.json")?;
        opt.load(&sdir.join("optimizer.safetensors"), st.step)?;
        start_step = st.step;
        if let Some(pos) = st.input.filter(|p| p.fingerprint == fingerprint && !p.complete) {
            if rank == 0 && !args.input.quiet {
                eprintln!(
                    "{TOOL}: resuming the same input at epoch {}, batch {} (step {}); {} of {} batches done",
                    pos.epoch + 1,
                    pos.batches + 1,
                    st.step + 1,
                    pos.epoch * steps_per_epoch + pos.batches,
                    total_new
                );
            }
            skip = Some((pos.epoch, pos.batches));
            resumed_decay = Some(st.lr_decay_steps);
        }
    }
    let done_before = skip.map_or(0, |(e, b)| e * steps_per_epoch + b);
    let total_new = total_new - done_before.min(total_new);
    let decay_steps = args.lr_decay_steps.or(resumed_decay).unwrap_or(start_step + total_new);
    let save_kind = match args.save_dtype.as_str() {
        "auto" => model.config.dtype_name().map(weights::parse_kind).transpose()?.unwrap_or(Kind::Float),
        s => weights::parse_kind(s).map_err(|e| cli::usage(e.to_string()))?,
    };
    let save_opts = SaveOptions { kind: save_kind, max_shard_bytes: parse_size(&args.max_shard_size)? };
    let mut metrics = match args.metrics.as_ref().filter(|_| rank == 0) {
        Some(p) => Some(
            std::fs::OpenOptions::new()
                .create(true)
                .append(true)
                .open(p)
                .with_context(|| format!("cannot open metrics file `{}`", p.display()))?,
        ),
        None => None,
    };
    let eps_high = args.eps_clip_high.unwrap_or(args.eps_clip);
    let lens: Vec<usize> = samples.iter().map(|s| s.tokens.len()).collect();
    let pb = cli::progress(args.input.quiet || rank != 0, Some(total_new), "steps");
    if let Some(s) = &sync {
        s.define_grads();
    }
    let mut rng = crate::rng::Rng::new(args.seed);
    let mut step = start_step;
    let save = |model: &Model, opt: &AdamW, step: u64, pos: InputPosition| -> Result<()> {
        let Some(dest) = &args.save else { return Ok(()) };
        if rank != 0 {
            // Only rank 0 writes; the others wait here for it.
            comm.barrier("wait for rank 0 to write the checkpoint");
            return Ok(());
        }
        let state = TrainerState {
            step,
            lr: args.lr,
            min_lr: args.min_lr,
            lr_warmup_steps: args.lr_warmup_steps,
            lr_decay_steps: decay_steps,
            lr_schedule: args.lr_schedule,
            seed: args.seed,
            input: Some(pos),
        };
        checkpoint::save(model, dest, &save_opts, &model_dir, |dir| {
            let sdir = dir.join("trainer_state");
            std::fs::create_dir_all(&sdir)?;
            opt.save(&sdir.join("optimizer.safetensors"))?;
            std::fs::write(sdir.join("state.json"), serde_json::to_string_pretty(&state)? + "\n")?;
            Ok(())
        })?;
        if args.keep_last > 0 {
            checkpoint::prune(dest, args.keep_last)?;
        }
        comm.barrier("wait for rank 0 to write the checkpoint");
        Ok(())
    };

    let position = |epoch: u64, batches: u64, complete: bool| InputPosition {
        fingerprint: fingerprint.clone(),
        samples: n,
        epoch,
        batches,
        complete,
    };
    if args.max_steps == Some(0) {
        return Err(cli::usage("`--max-steps` must be at least 1"));
    }
    let mut end = position(args.epochs, 0, true);
    'epochs: for epoch in 0..args.epochs {
        // Shuffled every epoch, skipped ones too, so a resumed run sees the
        // order the interrupted one would have.
        let mut order: Vec<usize> = (0..n).collect();
        if args.shuffle {
            rng.shuffle(&mut order);
        }
        for (b, chunk) in order.chunks(gbs).enumerate() {
            if skip.is_some_and(|(e, k)| epoch < e || (epoch == e && (b as u64) < k)) {
                continue;
            }
            let t0 = Instant::now();
            let lr = lr_at(step, args.lr, args.min_lr, args.lr_warmup_steps, decay_steps, args.lr_schedule);
            // This rank's token-balanced share of the global batch.
            let mine = crate::dist::shard(chunk, &lens, world).swap_remove(rank);
            let dp = sync.as_ref().map(|s| (comm, s));
            let st = train_step(&mut model, &mut opt, args, &samples, &mine, &lens, eps_high, lr, dp)?;
            step += 1;
            let secs = t0.elapsed().as_secs_f64();
            let (grad_norm, s) = st;
            let tk = s.tokens.max(1.0);
            let mut m = json!({
                "step": step, "epoch": epoch, "samples": chunk.len(), "tokens": s.all_tokens,
                "trained_tokens": s.tokens, "loss": s.loss / tk, "lr": lr, "grad_norm": grad_norm,
                "entropy": s.entropy / tk, "tokens_per_s": s.all_tokens as f64 / secs, "step_time_s": secs,
                "peak_rss_bytes": peak_rss_bytes(), "world_size": world,
            });
            if world > 1 {
                m["allreduce_s"] = json!(s.allreduce_s);
            }
            if rl {
                let extra = json!({
                    "pg_loss": s.pg_loss / tk, "kl_loss": s.kl_loss / tk, "clipfrac": s.clipped / tk,
                    "approx_kl": s.approx_kl / tk, "ratio_min": s.ratio_min, "ratio_max": s.ratio_max,
                    "opsm_dropped_seqs": s.opsm_dropped,
                });
                for (k, v) in extra.as_object().expect("object") {
                    m[k] = v.clone();
                }
                if args.tis_clip.is_some() {
                    m["tis_weight_mean"] = json!(s.tis / tk);
                }
            }
            if let Some(c) = critic.as_mut() {
                for (k, v) in c.step(&samples, chunk, &lens)?.as_object().expect("object") {
                    m[k] = v.clone();
                }
            }
            if s.mismatch_tokens > 0.0 {
                m["mismatch_kl"] = json!(s.mismatch_k3 / s.mismatch_tokens);
                m["mismatch_max_abs"] = json!(s.mismatch_max);
            }
            if let Some(f) = metrics.as_mut() {
                writeln!(f, "{m}").context("writing metrics")?;
                f.flush()?;
            }
            pb.inc(1);
            pb.set_message(format!("loss {:.4}", s.loss / tk));
            let (e, k) = if b + 1 == steps_per_epoch as usize { (epoch + 1, 0) } else { (epoch, b as u64 + 1) };
            let last = step == start_step + total_new;
            if args.max_steps.is_some_and(|m| step - start_step >= m) && !last {
                end = position(e, k, false);
                break 'epochs;
            }
            if args.save_interval > 0 && step % args.save_interval == 0 && !last {
                save(&model, &opt, step, position(e, k, false))?;
            }
        }
    }
    pb.finish_and_clear();
    if let Some(c) = &critic {
        c.save(&save_opts, &model_dir)?;
    }
    save(&model, &opt, step, end)?;
    inp.finish(TOOL, 0)?;
    Ok(ExitCode::SUCCESS)
}

/// One optimizer step over the samples `chunk`: the global batch, or with
/// `dp` (data parallel) this rank's share of it, whose gradients are summed
/// over the ranks before the update.
#[allow(clippy::too_many_arguments)]
fn train_step(
    model: &mut Model,
    opt: &mut AdamW,
    args: &TrainArgs,
    samples: &[Sample],
    chunk: &[usize],
    lens: &[usize],
    eps_high: f64,
    lr: f64,
    dp: Option<(&dyn Collective, &GradSync)>,
) -> Result<(f64, StepStats)> {
    let rl = args.loss == LossKind::Rl;
    // Global denominators, so accumulation over micro-batches (and ranks)
    // equals one big batch: counted over the whole global batch, never
    // averaged per rank.
    let mut counts = [
        chunk.iter().map(|&i| samples[i].loss_mask.iter().map(|&x| x as f64).sum::<f64>()).sum(),
        chunk.iter().filter(|&&i| samples[i].loss_mask.iter().any(|&x| x > 0.0)).count() as f64,
    ];
    let mut longest = [chunk.iter().map(|&i| samples[i].response_len()).max().unwrap_or(1) as f64];
    if let Some((comm, _)) = dp {
        crate::dist::grads::reduce_stats(comm, &mut counts, &mut longest);
    }
    let [tokens, seqs] = counts;
    let denom = loss::agg_denominator(args.loss_agg, tokens, seqs);
    let horizon = args.loss_agg_horizon.unwrap_or(longest[0]).max(1.0);
    let mut s = StepStats { ratio_min: f64::INFINITY, ratio_max: f64::NEG_INFINITY, ..Default::default() };
    opt.zero_grad();
    // Micro-batches of similar lengths waste less on padding; the step's
    // gradient does not depend on how its samples are grouped.
    let mut by_len = chunk.to_vec();
    by_len.sort_by_key(|&i| lens[i]);
    for mb in pack(&by_len, lens, args.max_tokens_per_micro_batch) {
        let group: Vec<&Sample> = mb.iter().map(|&i| &samples[i]).collect();
        let batch = make_batch(&group, model.device());
        s.all_tokens += batch.tokens;
        let t = batch.t as i64;
        let targets = batch.ids.narrow(1, 1, t - 1);
        let s = &mut s;
        let mut compute = |logits: &Tensor| -> Result<Tensor> {
            let logits = logits.narrow(1, 0, t - 1);
            let logp = token_logprobs(&logits, &targets, args.temperature);
            let mut mask = batch.mask.shallow_clone();
            if let Some(r) = &batch.rollout {
                let d = &logp.detach() - r; // log π_train − log π_rollout
                let k3 = d.exp() - &d - 1.0; // KL(rollout ‖ train) estimator on rollout samples
                s.mismatch_k3 += masked_sum(&k3, &mask);
                s.mismatch_tokens += mask.sum(Kind::Float).double_value(&[]);
                let (lo, hi) = masked_minmax(&d.abs(), &mask);
                if hi.is_finite() {
                    s.mismatch_max = s.mismatch_max.max(hi.max(lo));
                }
            }
            let need_entropy_grad = rl && args.entropy_coef != 0.0;
            let ent = if need_entropy_grad {
                loss::entropy(&logits, args.temperature)
            } else {
                tch::no_grad(|| loss::entropy(&logits.detach(), args.temperature))
            };
            let token_loss = if rl {
                let old = batch.old.as_ref().context("old log-probs")?;
                if let Some(delta) = args.opsm_delta {
                    let beh = batch.rollout.as_ref().unwrap_or(old);
                    let keep = loss::opsm_keep(&logp, beh, &batch.adv, &mask, delta);
                    let had = mask.sum_dim_intlist([-1i64].as_slice(), false, Kind::Float).gt(0.0).to_kind(Kind::Float);
                    s.opsm_dropped += (had * (keep.squeeze_dim(-1) * -1.0 + 1.0)).sum(Kind::Float).double_value(&[]);
                    mask = &mask * keep;
                }
                let (mut pg, clipped, ratio) = match args.policy_loss {
                    PolicyLoss::Ppo => {
                        loss::ppo_token_loss(&logp, old, &batch.adv, args.eps_clip, eps_high, args.eps_clip_c)
                    }
                    PolicyLoss::Gspo => loss::gspo_token_loss(&logp, old, &batch.adv, &mask, args.eps_clip, eps_high),
                };
                if let Some(c) = args.tis_clip {
                    let w = loss::tis_weights(old, batch.rollout.as_ref().context("rollout log-probs")?, c);
                    s.tis += masked_sum(&w, &mask);
                    pg = pg * w;
                }
                s.pg_loss += masked_sum(&pg, &mask);
                s.clipped += masked_sum(&clipped, &mask);
                s.approx_kl += masked_sum(&(old - logp.detach()), &mask);
                let (lo, hi) = masked_minmax(&ratio, &mask);
                if lo.is_finite() {
                    s.ratio_min = s.ratio_min.min(lo);
                    s.ratio_max = s.ratio_max.max(hi);
                }
                let mut total = pg;
                if args.kl_loss_coef != 0.0 {
                    let r = batch.reference.as_ref().context("reference log-probs")?;
                    let kl = loss::kl_penalty(&logp, r, args.kl_loss_type);
                    s.kl_loss += masked_sum(&kl, &mask);
                    total = total + kl * args.kl_loss_coef;
                }
                if need_entropy_grad {
                    total = total - &ent * args.entropy_coef;
                }
                total
            } else {
                -&logp
            };
            s.entropy += masked_sum(&ent, &mask);
            s.tokens += mask.sum(Kind::Float).double_value(&[]);
            s.loss += masked_sum(&token_loss, &mask);
            Ok(loss::agg_sum(&token_loss, &mask, args.loss_agg, horizon) / denom)
        };
        if args.gradient_checkpointing {
            model.forward_backward_checkpointed(&batch.ids, Some(&batch.attn), compute)?;
        } else {
            let logits = model.forward(&batch.ids, Some(&batch.attn));
            compute(&logits)?.backward();
        }
    }
    if let Some((comm, sync)) = dp {
        // Sum over ranks: each rank's loss was already divided by the global
        // denominator. Afterwards every rank holds the same gradients, so the
        // clipping norm below is the global one.
        s.allreduce_s = sync.all_reduce(comm);
        let mut sums = [
            s.loss,
            s.pg_loss,
            s.kl_loss,
            s.entropy,
            s.clipped,
            s.approx_kl,
            s.tis,
            s.mismatch_k3,
            s.mismatch_tokens,
            s.opsm_dropped,
            s.tokens,
            s.all_tokens as f64,
        ];
        let mut maxes = [-s.ratio_min, s.ratio_max, s.mismatch_max];
        crate::dist::grads::reduce_stats(comm, &mut sums, &mut maxes);
        [
            s.loss,
            s.pg_loss,
            s.kl_loss,
            s.entropy,
            s.clipped,
            s.approx_kl,
            s.tis,
            s.mismatch_k3,
            s.mismatch_tokens,
            s.opsm_dropped,
            s.tokens,
        ] = sums[..11].try_into().expect("11 sums");
        s.all_tokens = sums[11] as usize;
        (s.ratio_min, s.ratio_max, s.mismatch_max) = (-maxes[0], maxes[1], maxes[2]);
    }
    let norm = opt.clip_grad_norm(args.clip_grad);
    if norm.is_finite() {
        opt.step(lr);
    } else {
        cli::warn(TOOL, format!("gradient norm is {norm}; step skipped"));
        opt.step += 1;
    }
    Ok((norm, s))
}

pub fn init(a: &InitArgs) -> Result<ExitCode> {
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
    let kind = weights::parse_kind(&a.dtype).map_err(|e| cli::usage(e.to_string()))?;
    if cfg.dtype_name().is_none() {
        cfg.torch_dtype = Some(weights::kind_name(kind).to_string());
    }
    tch::manual_seed(a.seed as i64);
    let model = tch::no_grad(|| Model::new(cfg, Device::Cpu, Kind::Float))?;
    checkpoint::save(&model, &a.out, &SaveOptions { kind, ..Default::default() }, &tok.dir, |_| Ok(()))?;
    Ok(ExitCode::SUCCESS)
}

pub fn logprobs(a: &LogprobsArgs) -> Result<ExitCode> {
    let device = parse_device(&a.device)?;
    set_threads(a.threads);
    if a.temperature <= 0.0 || a.max_tokens_per_micro_batch == 0 {
        return Err(cli::usage("`--temperature` and `--max-tokens-per-micro-batch` must be positive"));
    }
    let model = Model::load(&a.model, device, Kind::Float)?;
    annotate(&a.input, &a.output, |refs| score(&model, refs, a.max_tokens_per_micro_batch, a.temperature), |r, lp| {
        r.ref_log_probs = Some(lp)
    })
}

/// The streaming body of `arl-train logprobs` and `arl-train values`: reads
/// records batch by batch, rejects those that cannot be scored, computes one
/// number per response token for the rest (`compute`) and stores it (`put`).
pub(crate) fn annotate(
    input: &cli::InputArgs,
    output: &cli::OutputArgs,
    mut compute: impl FnMut(&[&Sample]) -> Vec<Vec<f32>>,
    put: impl Fn(&mut crate::record::Record, Vec<f32>),
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
