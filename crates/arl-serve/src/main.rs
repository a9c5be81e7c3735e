//! `arl-serve`: an SGLang-compatible inference server on tch.
//!
//! Input: a Hugging Face model directory (as `arl-train` reads and writes it).
//! Output: HTTP on `--host`/`--port`; the bound address is printed on stderr
//! (`arl-serve: listening on http://127.0.0.1:30000`). Runs until killed.
//! Exit codes: 1 when the model cannot be loaded or the port cannot be bound;
//! 2 usage error; 65 when a `--lora-paths` adapter does not load.
use anyhow::{Context, Result};
use arl_chat::tokenizer::Tokenizer;
use arl_core::cli::{self, EXIT_CODES_HELP};
use arl_serve::{self as serve, engine};
use clap::Parser;
use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;

pub const TOOL: &str = "arl-serve";

const DECODE_MATMUL_HELP: &str = "\
How the products of a decode step (up to 64 sequences at once) multiply in a float32
model on the CPU: `blas` is libtorch's `linear` (MKL's sgemv/sgemm), `float32` arl's own
kernel on the float32 weights (the output columns split over the intra-op threads;
the same values up to the order of the sums), `bf16` arl's kernel on bf16 copies of
the weights: half the bytes each step streams, widened exactly to float32 and
multiplied and summed in float32 (a second copy of the weights, half the float32
size; log-probs move by the weights' rounding). `auto` runs a real decode step at 1,
8 and 32 sequences each way at load, logs the times and takes the fastest (5%
margin); it tries `bf16` only under `--dtype auto`, so `--dtype float32` keeps
float32 weights. Under `float32` and `bf16` the whole decode step runs in arl's own
code, with no libtorch operator between the products (`ARL_NATIVE_DECODE=0` turns
that off, for comparisons). Batches of more rows multiply as `--cpu-matmul` says. No
effect on CUDA or on bfloat16/float16 models.";

const CPU_MATMUL_HELP: &str = "\
How the projections and the LM head multiply on the CPU in float32: `blas` is
libtorch's own `linear` (MKL in the PyPI build), `onednn` oneDNN with the
weights packed once into its layout (a second copy of those weights in memory,
refreshed on every weight update), `auto` the faster of the two, measured at load
on the model's largest projection at 32 rows and logged (oneDNN must be at
least 1.1x faster). MKL runs its AVX2 code on AMD processors even where they
have full-width AVX-512; oneDNN picks kernels by instruction set: on a Zen 5
EPYC it decoded SmolLM2-135M about 1.7x faster. Batches under 4 rows take
the BLAS path either way. No effect on CUDA or on bfloat16/float16 models.";

const LORA_PATHS_HELP: &str = "\
LoRA adapters to serve from the start, as SGLang's `--lora-paths`: `NAME=DIR`,
or `DIR` (its name is then DIR as written), or the JSON object
`{\"lora_name\": NAME, \"lora_path\": DIR}`; several after one flag or the
flag repeated. An adapter is a PEFT directory (`adapter_config.json`,
`adapter_model.safetensors`, as `arl-train --lora-rank` and PEFT write them) for
this base model: every tensor is checked against the model, and one that does
not fit (another base model, DoRA, biases, per-module ranks) stops the server
before it listens, exit code 65.

A request names its adapter in `lora_path` (`/generate`: a name for every
prompt, or a list with a name or null per prompt of a batch;
`/v1/chat/completions`: an extra body field); without one it runs the base
model, and a name that is not loaded is a 400 naming it. Requests of
different adapters and of the base are decoded in the same batches (each
adapter's term computed for its own rows). `POST /load_lora_adapter`
`{\"lora_name\", \"lora_path\"}` loads one more, or replaces the adapter of
that name (a new version), in every `--dp-size` replica; `POST
/unload_lora_adapter` `{\"lora_name\"}` removes one; both answer SGLang's
`{\"success\", \"error_message\", \"loaded_adapters\": {name: path}}`, HTTP
400 when they fail, and then the server serves exactly what it served.
In-flight requests: a request keeps the version of its adapter that was
loaded when the server received it until it ends, also when the adapter is
replaced or unloaded meanwhile (as SGLang lets such requests finish); the old
version is freed when its last request ends. Versions: `/load_lora_adapter`
takes an optional `weight_version` (what `arl-sync --lora` sends), else the
adapter's versions count `1`, `2`, … per name; a request on an adapter reports
its adapter's version as `meta_info.weight_version`. `/get_model_info` and
`/get_server_info` list the adapters (`lora_adapters`: path, weight version,
rank, alpha, targets), `/v1/models` shows each as a model whose `parent` is
the base. The prefix cache shares KV only between sequences of the same
adapter (or of the base), and drops an unloaded adapter's.";

/// Serve a model over SGLang's HTTP API: /generate, weight updates, OpenAI chat with tools
///
/// Endpoints: `POST /generate` (text or input_ids, single or batched, `n`,
/// log-probs, stop strings and ids, SSE streaming), `/health`,
/// `/health_generate`, `/get_model_info`, `/get_weight_version`,
/// `/get_server_info`, `/get_load`, `/flush_cache`, `/pause_generation`,
/// `/continue_generation`, `/abort_request`, `/update_weights_from_disk`,
/// `/update_weight_version`, `/v1/models` and `/v1/chat/completions` (with
/// `tools`; tool calls parsed in the `--tool-call-parser` format, by default
/// the Qwen `<tool_call>` form; tools shown in a tool header when the chat
/// template has no tool section, see `--tool-header`; `stream` sends
/// OpenAI `chat.completion.chunk` events). Concurrent requests are batched
/// continuously: new requests join between decode steps, prompts admitted
/// together are prefilled in one batched forward, and each decode step is one
/// forward over every running sequence (one shared KV cache, a slot per
/// sequence, each attending to its own length). `--dp-size N` runs N such
/// replicas behind the port, a new request going to the least loaded. A prefix cache
/// (`--prefix-cache-slots`) starts a new sequence from the longest prefix of its prompt that a
/// running sequence, or one that ended, already holds (`meta_info.cached_tokens`): a group's samples
/// share one prompt prefill, and a multi-turn episode's next turn reuses its history; a weight
/// update, an adapter's unloading and `/flush_cache` drop what it holds. LoRA adapters (`--lora-paths`,
/// `/load_lora_adapter`, `/unload_lora_adapter`) are picked per request by
/// `lora_path` and batched with each other and the base. Returned log-probs are those of the
/// temperature-scaled distribution before top-k/top-p truncation, as
/// `arl-train` recomputes them.
#[derive(Debug, Parser)]
#[command(name = "arl-serve", version, after_long_help = EXIT_CODES_HELP)]
pub struct Args {
    /// Model directory (config.json, safetensors, tokenizer.json)
    #[arg(long, value_name = "DIR", help_heading = "Model")]
    pub model_path: PathBuf,

    /// Tokenizer directory; default: `--model-path`
    #[arg(long, value_name = "DIR", help_heading = "Model")]
    pub tokenizer_path: Option<PathBuf>,

    /// Device: `auto` (CUDA when available), `cpu`, `cuda`, `cuda:N`
    #[arg(long, default_value = "auto", value_name = "DEVICE", help_heading = "Model")]
    pub device: String,

    /// Weight dtype: `auto` (float32 on CPU; the checkpoint's dtype, else bfloat16, on CUDA),
    /// `float32`, `bfloat16`, `float16`
    #[arg(long, default_value = "auto", value_name = "DTYPE", help_heading = "Model")]
    pub dtype: String,

    /// CPU float32 matrix multiplies: `auto` (oneDNN when it measures faster at load), `onednn`, `blas`
    #[arg(long, default_value = "auto", value_name = "HOW", help_heading = "Model", long_help = CPU_MATMUL_HELP)]
    pub cpu_matmul: String,

    /// CPU float32 decode matrix products (≤64 rows): `auto` (measured at load), `blas`, `float32`, `bf16`
    #[arg(long, default_value = "auto", value_name = "HOW", help_heading = "Model", long_help = DECODE_MATMUL_HELP)]
    pub decode_matmul: String,

    /// Weight version reported until the first update (`/get_model_info`, `meta_info.weight_version`)
    #[arg(long, default_value = "default", value_name = "V", help_heading = "Model")]
    pub weight_version: String,

    /// Model name in `/v1/models` and chat responses; default: `--model-path`
    #[arg(long, value_name = "NAME", help_heading = "Model")]
    pub served_model_name: Option<String>,

    /// LoRA adapters served from the start: `NAME=DIR` or `DIR` (named DIR); requests pick one by `lora_path`
    #[arg(long, num_args = 1.., value_name = "NAME=DIR", help_heading = "Model", long_help = LORA_PATHS_HELP)]
    pub lora_paths: Vec<String>,

    /// TEST DOUBLE: answer from a JSONL file of scripted completions
    /// (`{"completion": TEXT, "when"?: SUBSTRING, "token_delay_ms"?: MS}`; the
    /// entry whose `when` occurs latest in the prompt wins, else entries
    /// without `when` in turn; a decode step holding a completion with
    /// `token_delay_ms` takes that long), tokenised with the model's tokenizer,
    /// instead of running the model.
    /// Only the tokenizer and config of `--model-path` are read
    #[arg(long, value_name = "FILE", help_heading = "Model")]
    pub scripted: Option<PathBuf>,

    /// How the model writes tool calls (SGLang's names): `qwen25` (also `qwen`, `hermes`), `llama3`, `mistral`
    #[arg(long, default_value = "qwen25", value_name = "NAME", help_heading = "Chat",
          long_help = arl_chat::toolcall::PARSER_HELP)]
    pub tool_call_parser: arl_chat::toolcall::Parser,

    /// Tool header template for a chat template without a tool section (tools put in the system message)
    #[arg(long, value_name = "FILE", help_heading = "Chat", long_help = arl_chat::tool_header::HEADER_HELP)]
    pub tool_header: Option<PathBuf>,

    /// When the tool header is used: `auto` (the template has no tool section), `on`, `off`
    #[arg(long, default_value = "auto", value_name = "MODE", env = "ARL_TOOL_HEADER_MODE", help_heading = "Chat",
          long_help = arl_chat::tool_header::MODE_HELP)]
    pub tool_header_mode: arl_chat::tool_header::HeaderMode,

    /// Address to bind (loopback by default; `0.0.0.0` exposes the server)
    #[arg(long, default_value = "127.0.0.1", value_name = "HOST", help_heading = "Server")]
    pub host: String,

    /// Port (0 picks a free one; the bound address is printed on stderr)
    #[arg(long, default_value_t = 30000, value_name = "PORT", help_heading = "Server")]
    pub port: u16,

    /// Require `Authorization: Bearer KEY` on every route but `/health`
    #[arg(long, value_name = "KEY", help_heading = "Server")]
    pub api_key: Option<String>,

    /// Largest request body accepted, in bytes (larger ones get HTTP 413)
    #[arg(long, default_value_t = 64 << 20, value_name = "BYTES", help_heading = "Server")]
    pub max_body_bytes: usize,

    /// Seconds a client has to send a request's headers, and then its body;
    /// a connection that stalls longer is closed (a body that stalls gets
    /// HTTP 408), so stalled clients cannot pile up. Generation time does not count
    #[arg(long, default_value_t = 30.0, value_name = "SECS", help_heading = "Server")]
    pub read_timeout: f64,

    /// Sequences decoded together at most; more requests wait in a queue
    #[arg(long, default_value_t = 128, value_name = "N", help_heading = "Scheduling")]
    pub max_running_requests: usize,

    /// Prompts admitted together are prefilled in one batched forward of at most
    /// this many (padded) tokens; a longer prompt is prefilled alone
    #[arg(long, default_value_t = 16384, value_name = "N", help_heading = "Scheduling")]
    pub max_prefill_tokens: usize,

    /// Prefix cache: at most this many finished sequences' KV caches are kept for reuse (they
    /// only take slots no running sequence needs; the least recently used goes first); running
    /// sequences are always sources. 0 turns the cache off
    #[arg(long, default_value_t = serve::tch_engine::DEFAULT_PREFIX_SLOTS, value_name = "N", help_heading = "Scheduling")]
    pub prefix_cache_slots: usize,

    /// No prefix cache (SGLang's flag; the same as `--prefix-cache-slots 0` and no sharing between
    /// running sequences)
    #[arg(long, help_heading = "Scheduling")]
    pub disable_radix_cache: bool,

    /// Seed for requests without `sampling_seed`; default: from the clock
    #[arg(long, value_name = "SEED", help_heading = "Scheduling")]
    pub random_seed: Option<u64>,

    /// Data-parallel replicas (SGLang's `--dp-size`): this many copies of the
    /// model, each with its own scheduler, KV cache and batch, behind one
    /// port; a new request goes to the least loaded. On CUDA replica i runs on
    /// `cuda:(N+i)` for `--device cuda:N`; on the CPU the replicas share the
    /// cores (by default `cores / dp-size` libtorch threads each, and one for
    /// models under 20M parameters: two replicas on two cores decode about
    /// 1.5x the tokens per second of one on the test model)
    #[arg(long, default_value_t = 1, value_name = "N", help_heading = "Scheduling")]
    pub dp_size: usize,

    /// Intra-op CPU threads for libtorch. Default on the CPU: 1 for models under
    /// 20M parameters (their decode-step kernels are too small to split: one
    /// thread was 1.3-1.4x faster than two on the test and demo models, and
    /// leaves the other cores to the rollout), otherwise libtorch's own choice
    #[arg(long, value_name = "N", help_heading = "Scheduling")]
    pub cpu_threads: Option<i32>,

    /// Log level on stderr (SGLang's `--log-level`): `error`, `warn`,
    /// `info` (weight updates, aborts), `debug` (every request as it ends:
    /// rid, prompt and generated tokens, how it ended, latency), `trace`
    #[arg(long, value_enum, default_value_t = LogLevel::Info, value_name = "LEVEL", help_heading = "Logging")]
    pub log_level: LogLevel,

    /// Log every request as it ends at `info` (SGLang's `--log-requests`)
    #[arg(long, help_heading = "Logging")]
    pub log_requests: bool,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum LogLevel {
    Error,
    Warn,
    Info,
    Debug,
    Trace,
}

/// Sends `tracing` events at `level` and above to stderr, one line each
/// (time, level, target, message and fields).
fn init_logging(level: LogLevel) {
    use tracing::Level;
    let level = match level {
        LogLevel::Error => Level::ERROR,
        LogLevel::Warn => Level::WARN,
        LogLevel::Info => Level::INFO,
        LogLevel::Debug => Level::DEBUG,
        LogLevel::Trace => Level::TRACE,
    };
    let _ = tracing_subscriber::fmt().with_max_level(level).with_writer(std::io::stderr).with_target(false).try_init();
}

pub fn run(args: Args) -> Result<ExitCode> {
    init_logging(args.log_level);
    if args.max_running_requests == 0 {
        return Err(cli::usage("`--max-running-requests` must be at least 1"));
    }
    if args.max_prefill_tokens == 0 {
        return Err(cli::usage("`--max-prefill-tokens` must be at least 1"));
    }
    if args.dp_size == 0 {
        return Err(cli::usage("`--dp-size` must be at least 1"));
    }
    if !(args.read_timeout.is_finite() && args.read_timeout > 0.0) {
        return Err(cli::usage("`--read-timeout` must be a positive number of seconds"));
    }
    let lora_paths = parse_lora_paths(&args.lora_paths)?;
    let tok_dir = args.tokenizer_path.clone().unwrap_or_else(|| args.model_path.clone());
    let tok = Arc::new(Tokenizer::load(&tok_dir).context("loading the tokenizer")?);
    let eos = engine::eos_ids(&args.model_path, &tok)?;
    let tool_header = check_tool_header(&args, &tok)?;
    let seed = args.random_seed.unwrap_or_else(|| {
        std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_nanos() as u64)
    });
    let Loaded { engines, device, dtype, cpu_matmul, decode_matmul } = match &args.scripted {
        Some(file) => {
            cli::warn(
                TOOL,
                format!("TEST DOUBLE: answering scripted completions from `{}`, not the model", file.display()),
            );
            let engines = (0..args.dp_size)
                .map(|_| {
                    Ok(Box::new(engine::ScriptedEngine::load(file, &args.model_path, tok.clone())?)
                        as Box<dyn engine::Engine>)
                })
                .collect::<Result<_>>()?;
            Loaded {
                engines,
                device: "none".into(),
                dtype: "none".into(),
                cpu_matmul: "none".into(),
                decode_matmul: "none".into(),
            }
        }
        None => load_model(&args)?,
    };
    let (context_len, vocab_size) = (engines[0].context_len(), engines[0].vocab_size());
    let model_path = args.model_path.canonicalize().unwrap_or_else(|_| args.model_path.clone()).display().to_string();
    let cfg = serve::Config {
        served_model_name: args.served_model_name.clone().unwrap_or_else(|| model_path.clone()),
        tokenizer_path: tok_dir.display().to_string(),
        model_path,
        host: args.host.clone(),
        port: args.port,
        api_key: args.api_key.clone(),
        max_running_requests: args.max_running_requests,
        max_prefill_tokens: args.max_prefill_tokens,
        max_body_bytes: args.max_body_bytes,
        read_timeout: std::time::Duration::from_secs_f64(args.read_timeout),
        weight_version: args.weight_version.clone(),
        random_seed: seed,
        context_len,
        vocab_size,
        device,
        dtype,
        cpu_matmul,
        decode_matmul,
        scripted: args.scripted.as_ref().map(|p| p.display().to_string()),
        quiet: false,
        log_requests: args.log_requests,
        dp_size: args.dp_size,
        tool_call_parser: args.tool_call_parser,
        tool_header,
        tool_header_mode: args.tool_header_mode,
        lora_paths,
    };
    serve::serve(cfg, engines, tok, eos)?;
    Ok(ExitCode::SUCCESS)
}

/// `--lora-paths` entries as (name, directory): `NAME=DIR`, `DIR` (named
/// DIR), or SGLang's `{"lora_name": …, "lora_path": …}`; a name given twice
/// is a usage error.
fn parse_lora_paths(items: &[String]) -> Result<Vec<(String, String)>> {
    let mut out: Vec<(String, String)> = Vec::new();
    for item in items {
        let (name, dir) = if item.trim_start().starts_with('{') {
            let v: serde_json::Value = serde_json::from_str(item)
                .map_err(|e| cli::usage(format!("`--lora-paths {item}`: not a JSON object: {e}")))?;
            let get = |k: &str| v.get(k).and_then(serde_json::Value::as_str).map(str::to_string);
            match (get("lora_name"), get("lora_path")) {
                (Some(n), Some(p)) => (n, p),
                _ => {
                    return Err(cli::usage(format!(
                        "`--lora-paths {item}`: the object needs `lora_name` and `lora_path` strings"
                    )))
                }
            }
        } else {
            match item.split_once('=') {
                Some((n, p)) => (n.to_string(), p.to_string()),
                None => (item.clone(), item.clone()),
            }
        };
        if name.is_empty() || dir.is_empty() {
            return Err(cli::usage(format!("`--lora-paths {item}`: expected NAME=DIR or DIR")));
        }
        if out.iter().any(|(n, _)| *n == name) {
            return Err(cli::usage(format!("`--lora-paths`: the name `{name}` is given twice")));
        }
        out.push((name, dir));
    }
    Ok(out)
}

/// The text of `--tool-header FILE`, checked before the model loads: an
/// unreadable file is a usage error, a header that does not compile or
/// render (with the model's chat template, when it has one) bad data.
fn check_tool_header(args: &Args, tok: &Tokenizer) -> Result<Option<String>> {
    let Some(path) = &args.tool_header else { return Ok(None) };
    let text = std::fs::read_to_string(path)
        .map_err(|e| cli::usage(format!("`--tool-header {}`: cannot read it: {e}", path.display())))?;
    // Without a chat template the chat endpoint answers 400 anyway.
    if let Ok(t) = arl_chat::template::ChatTemplate::from_tokenizer(tok) {
        arl_chat::tool_header::ToolPrompt::new(&t, args.tool_call_parser, Some(&text), args.tool_header_mode)
            .map_err(|e| cli::data(format!("`--tool-header {}`: {e:#}", path.display())))?;
    }
    Ok(Some(text))
}

/// The engines and what was chosen for them (`/get_server_info`).
struct Loaded {
    engines: Vec<Box<dyn engine::Engine>>,
    device: String,
    dtype: String,
    cpu_matmul: String,
    decode_matmul: String,
}

fn load_model(args: &Args) -> Result<Loaded> {
    use arl_serve::tch_engine;
    use tch::Device;
    if let Some(n) = args.cpu_threads {
        tch::set_num_threads(n);
    }
    let matmul = tch_engine::parse_cpu_matmul(&args.cpu_matmul).map_err(|e| cli::usage(e.to_string()))?;
    let decode = tch_engine::parse_decode_matmul(&args.decode_matmul).map_err(|e| cli::usage(e.to_string()))?;
    // Read as `arl-train` reads it; a CUDA device this machine lacks is an
    // error naming how many it has, before any weight is loaded.
    let spec = arl_model::device::DeviceSpec::parse(&args.device).map_err(cli::usage)?;
    let device = spec.resolve(None)?;
    let kind = tch_engine::parse_dtype(&args.dtype, device, &args.model_path).map_err(|e| cli::usage(e.to_string()))?;
    let devices: Vec<Device> = match device {
        Device::Cuda(base) if args.dp_size > 1 => {
            let have = tch::Cuda::device_count() as usize;
            if base + args.dp_size > have {
                return Err(cli::usage(format!(
                    "`--dp-size {}` from `cuda:{base}` needs {} CUDA devices; this machine has {have}",
                    args.dp_size,
                    base + args.dp_size
                )));
            }
            (0..args.dp_size).map(|i| Device::Cuda(base + i)).collect()
        }
        d => vec![d; args.dp_size],
    };
    let engines: Vec<tch_engine::TchEngine> =
        devices.iter().map(|&d| tch_engine::TchEngine::load(&args.model_path, d, kind)).collect::<Result<_>>()?;
    if args.cpu_threads.is_none() && device == Device::Cpu {
        if engines[0].parameters() < 20_000_000 {
            tch::set_num_threads(1);
        } else if args.dp_size > 1 {
            // The replicas run side by side: split the cores between them.
            tch::set_num_threads((tch::get_num_threads() / args.dp_size as i32).max(1));
        }
    }
    let mut engines = engines;
    let prefix_slots = if args.disable_radix_cache { 0 } else { args.prefix_cache_slots };
    for e in engines.iter_mut() {
        e.set_prefix_cache(prefix_slots);
    }
    let chosen = tch_engine::choose_cpu_matmul(&mut engines, matmul, |line| eprintln!("{TOOL}: {line}"))?;
    let bf16_ok = args.dtype == "auto";
    let decode = tch_engine::choose_decode_matmul(&mut engines, decode, bf16_ok, |line| eprintln!("{TOOL}: {line}"))?;
    let names = if devices.len() == 1 {
        format!("{device:?}")
    } else {
        devices.iter().map(|d| format!("{d:?}")).collect::<Vec<_>>().join(",")
    };
    Ok(Loaded {
        engines: engines.into_iter().map(|e| Box::new(e) as Box<dyn engine::Engine>).collect(),
        device: names,
        dtype: format!("{kind:?}"),
        cpu_matmul: chosen.to_string(),
        decode_matmul: decode.to_string(),
    })
}

fn main() -> std::process::ExitCode {
    arl_core::cli::bounded_omp_spin_by_default();
    arl_core::cli::main(TOOL, run)
}
