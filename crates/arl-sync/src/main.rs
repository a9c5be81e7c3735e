//! `arl-sync`: push a checkpoint to SGLang-compatible servers and verify they
//! serve it.
//!
//! Input: a checkpoint directory and server URLs (listed, or discovered from an
//! sgl-router). Output on stdout: one line per server, or a JSON summary with
//! `--json`. Exit codes: 0 every server is on the new version; 1 at least one
//! is not (or the router cannot be asked); 2 usage error; 65 the checkpoint is
//! incomplete (no server was touched).
use anyhow::Result;
use arl_core::cli::{self, EXIT_CODES_HELP};
use arl_sync::{self as sync, SyncOptions};
use clap::Parser;
use serde_json::json;
use std::io::Write;
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

pub const TOOL: &str = "arl-sync";

/// Push a checkpoint (or a LoRA adapter) to inference servers and verify each one serves it
///
/// Checks the checkpoint is complete (`config.json`, every shard named in
/// `model.safetensors.index.json`) before touching any server. Then, in
/// parallel, calls `POST /update_weights_from_disk` on each server with
/// `model_path`, `weight_version` and `abort_all_requests`, and verifies that
/// `GET /get_model_info` reports the new `weight_version` and that
/// `GET /health_generate` answers. Works with `arl-serve` and SGLang servers;
/// with `--router`, the workers are discovered from an sgl-router
/// (`GET /workers`, or the legacy `GET /list_workers`).
///
/// With `--lora NAME`, `--checkpoint` is a LoRA adapter directory (PEFT's
/// `adapter_config.json` and `adapter_model.safetensors`, as `arl-train
/// --lora-rank` saves it), checked before any server is touched. Each server gets
/// `POST /load_lora_adapter` `{lora_name, lora_path, weight_version}`
/// (`arl-serve` replaces its adapter of that name; requests already running
/// finish on the old version, new ones get the new one; a server that
/// refuses a name it has, as SGLang does, is sent `/unload_lora_adapter` and
/// the load again). Verified: the answer's `loaded_adapters` maps NAME to the
/// path; `/get_model_info`'s `lora_adapters` (on `arl-serve`) reports that path
/// and the `--weight-version`; and a one-token `/generate` with
/// `lora_path: NAME` answers (on `arl-serve`, with that `weight_version`). A
/// server that refuses the adapter (another base model's shapes, an
/// unsupported config) is a failed sync, exit code 1; it keeps serving what
/// it served.
#[derive(Debug, Parser)]
#[command(name = "arl-sync", version, after_long_help = EXIT_CODES_HELP)]
pub struct Args {
    /// Checkpoint directory to load (Hugging Face layout, as `arl-train --save` writes it;
    /// with `--lora`, the adapter's directory)
    #[arg(long, value_name = "DIR", help_heading = "What to push")]
    pub checkpoint: PathBuf,

    /// Push `--checkpoint` as the LoRA adapter NAME (`/load_lora_adapter`)
    /// instead of as full weights; requests pick it with `lora_path: NAME`
    /// (`arl-rollout --lora NAME`)
    #[arg(long, value_name = "NAME", help_heading = "What to push", conflicts_with = "abort_running")]
    pub lora: Option<String>,

    /// Version string the servers report afterwards (arl uses the training step)
    #[arg(long, value_name = "V", help_heading = "What to push")]
    pub weight_version: String,

    /// Path the servers load, when it differs from `--checkpoint` on their
    /// machine; default: the absolute path of `--checkpoint`
    #[arg(long, value_name = "PATH", help_heading = "What to push")]
    pub server_path: Option<String>,

    /// Server URL (`http://127.0.0.1:30000`; the scheme may be left out); repeat for several
    #[arg(long = "endpoint", value_name = "URL", help_heading = "Servers")]
    pub endpoints: Vec<String>,

    /// sgl-router URL: update every worker it lists (added to `--endpoint`s)
    #[arg(long, value_name = "URL", help_heading = "Servers")]
    pub router: Option<String>,

    /// Bearer token sent to servers and router (their `--api-key`)
    #[arg(long, env = "ARL_API_KEY", value_name = "KEY", hide_env_values = true, help_heading = "Servers")]
    pub api_key: Option<String>,

    /// Abort the requests running on each server instead of waiting for them
    /// (`abort_all_requests`; they finish with `finish_reason` `abort`).
    /// Not with `--lora`: an adapter is replaced without waiting
    #[arg(long, help_heading = "Behaviour")]
    pub abort_running: bool,

    /// Seconds allowed for one server's weight update
    #[arg(long, default_value_t = 600.0, value_name = "SECS", help_heading = "Behaviour")]
    pub timeout: f64,

    /// Seconds allowed for connecting, router discovery and each verification call
    #[arg(long, default_value_t = 30.0, value_name = "SECS", help_heading = "Behaviour")]
    pub verify_timeout: f64,

    /// Print a JSON summary instead of one line per server
    #[arg(long, help_heading = "Output")]
    pub json: bool,
}

fn secs(s: f64, flag: &str) -> Result<Duration> {
    if !(s.is_finite() && s > 0.0) {
        return Err(cli::usage(format!("`--{flag}` must be a positive number of seconds, got `{s}`")));
    }
    Ok(Duration::from_secs_f64(s))
}

pub fn run(args: Args) -> Result<ExitCode> {
    if args.endpoints.is_empty() && args.router.is_none() {
        return Err(cli::usage("give at least one `--endpoint URL` or a `--router URL`"));
    }
    let update_timeout = secs(args.timeout, "timeout")?;
    let verify_timeout = secs(args.verify_timeout, "verify-timeout")?;
    if args.lora.as_deref() == Some("") {
        return Err(cli::usage("`--lora` needs an adapter name"));
    }
    let checked = match args.lora {
        Some(_) => sync::check_adapter(&args.checkpoint),
        None => arl_core::model_dir::check_checkpoint(&args.checkpoint),
    };
    if let Err(e) = checked {
        return Err(cli::data(format!("{e:#}")));
    }
    let mut urls: Vec<String> = args.endpoints.iter().map(|u| sync::normalize_url(u)).collect();
    if let Some(router) = &args.router {
        let found = sync::discover_workers(router, &args.api_key, verify_timeout)?;
        if found.is_empty() {
            anyhow::bail!("router `{}` lists no workers", sync::normalize_url(router));
        }
        urls.extend(found);
    }
    let mut seen = std::collections::HashSet::new();
    urls.retain(|u| seen.insert(u.clone()));
    let opts = SyncOptions {
        model_path: args.server_path.clone().unwrap_or_else(|| sync::absolute(&args.checkpoint).display().to_string()),
        weight_version: args.weight_version.clone(),
        abort_running: args.abort_running,
        update_timeout,
        verify_timeout,
        api_key: args.api_key.clone(),
        lora: args.lora.clone(),
    };
    let results = sync::sync_all(&urls, &opts);
    let failed = results.iter().filter(|r| !r.ok).count();
    let mut out = std::io::stdout().lock();
    if args.json {
        let summary = json!({
            "weight_version": opts.weight_version,
            "model_path": opts.model_path,
            "lora": opts.lora,
            "ok": failed == 0,
            "servers": results.len(),
            "failed": failed,
            "results": results,
        });
        writeln!(out, "{}", serde_json::to_string_pretty(&summary)?)?;
    } else {
        let what = match &opts.lora {
            Some(name) => format!("lora={name} weight_version={}", opts.weight_version),
            None => format!("weight_version={}", opts.weight_version),
        };
        for r in &results {
            if r.ok {
                writeln!(out, "ok      {}  {what}  ({:.2}s)", r.url, r.seconds)?;
            } else {
                writeln!(out, "failed  {}  {}: {}  ({:.2}s)", r.url, r.stage, r.message, r.seconds)?;
            }
        }
    }
    out.flush()?;
    if failed > 0 {
        cli::warn(
            TOOL,
            match &opts.lora {
                Some(name) => format!(
                    "{failed} of {} servers do not serve LoRA adapter `{name}` at weight_version `{}`",
                    results.len(),
                    opts.weight_version
                ),
                None => {
                    format!("{failed} of {} servers are not on weight_version `{}`", results.len(), opts.weight_version)
                }
            },
        );
        return Ok(ExitCode::from(cli::exit::FAILURE));
    }
    Ok(ExitCode::SUCCESS)
}

fn main() -> std::process::ExitCode {
    arl_core::cli::main(TOOL, run)
}
