//! `arl-rollout`: prompt records in, trajectory records out, driving an
//! SGLang-compatible server and the environment (tools, sandbox) through
//! multi-turn episodes. See [`arl_rollout`] for how it works.
//!
//! Reads prompt records (arl-tasks output, slime JSONL, verl Parquet); writes
//! one trajectory record per sample (docs/DESIGN.md §3), a group (all `-n` samples
//! of a prompt) at a time as each completes. Exit codes: see [`arl_core::cli::exit`].
use anyhow::Result;
use arl_core::args::{DatasetArgs, InputArgs, OutputArgs};
use arl_core::cli::{usage, EXIT_CODES_HELP};
use arl_rollout::{Config, TOOL};
use clap::Parser;
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

/// Multi-turn agent rollouts against SGLang-compatible servers, with tools
///
/// Each prompt is rendered once with the model's chat template (tool
/// definitions in the system turn) and sampled `-n` times. Every episode is
/// token-in/token-out: generated ids are appended exactly as the server
/// returned them (`loss_mask` 1, log-probs from `output_token_logprobs`);
/// `<tool_call>{…}</tool_call>` blocks in a turn are run concurrently and the
/// template's tool-response turn is appended as tokens (`loss_mask` 0). An
/// episode ends when the model stops without a tool call (`completed`), or at
/// `--max-turns` / `--max-response-len` (`truncated`).
///
/// A record's own `tools` (OpenAI tool objects, e.g. from `arl-tasks import
/// bfcl:CATEGORY`) are offered after the environment's and never run: a
/// turn whose calls are not all to tools the environment runs ends the
/// episode (`completed`; the call is the answer).
///
/// Output: JSONL on stdout, streamed a group at a time (groups completing
/// together share a write); with `-o FILE` the groups go to `FILE.partial`
/// (flushed per group) and FILE appears when the run is complete
/// (`.parquet` → Parquet). `--resume` continues from `FILE.partial`.
///
/// Example: arl-rollout -i gsm8k.parquet --endpoint http://127.0.0.1:30000 --tokenizer ckpt/step-41 -n 8 --tools calculator
#[derive(Debug, Parser)]
#[command(name = "arl-rollout", version, after_long_help = EXIT_CODES_HELP)]
pub struct Args {
    #[command(flatten)]
    pub input: InputArgs,
    #[command(flatten)]
    pub output: OutputArgs,
    #[command(flatten)]
    pub dataset: DatasetArgs,

    /// Continue an interrupted run: keep the complete groups of `-o FILE`'s
    /// `FILE.partial` (or of FILE) and skip their `prompt_id`s
    #[arg(long, help_heading = "Output")]
    pub resume: bool,

    /// Write a timeline of the run to FILE (JSONL, one event a line): per
    /// sample, when each `/generate` request was queued for a `--concurrency`
    /// slot, sent and answered, each tool call's duration, retries (and the
    /// wait before them) and aborts; times in seconds from the run's start,
    /// whose wall-clock time the first line gives. Draw it and see where the
    /// time went with `arl-inspect trace FILE`
    ///
    /// Requests are not streamed, so `answered` is when the whole answer is
    /// in (the response time, not the time to the first token). The events go
    /// to `FILE.partial` as the run goes; it becomes FILE when the run ends,
    /// also when it fails. The format is described in `arl-inspect trace
    /// --help`. Without `--trace` nothing is timed.
    #[arg(long, value_name = "FILE", help_heading = "Output")]
    pub trace: Option<PathBuf>,

    /// SGLang server URL; repeat for several (groups are spread over them,
    /// least-loaded first; a group's turns stay on one server for prefix-cache
    /// reuse). Default: http://127.0.0.1:30000
    #[arg(long, value_name = "URL", help_heading = "Server")]
    pub endpoint: Vec<String>,
    /// An sgl-router URL instead of `--endpoint`s: requests go through it; aborts
    /// go to every worker it lists (`GET /workers`, else `/list_workers`)
    #[arg(long, value_name = "URL", conflicts_with = "endpoint", help_heading = "Server")]
    pub router: Option<String>,
    /// Sent as `Authorization: Bearer KEY`
    #[arg(long, env = "ARL_API_KEY", value_name = "KEY", hide_env_values = true, help_heading = "Server")]
    pub api_key: Option<String>,
    /// Most `/generate` requests in flight at once
    #[arg(long, default_value_t = 64, value_name = "N", help_heading = "Server")]
    pub concurrency: usize,
    /// Timeout of one `/generate` request, in seconds
    #[arg(long, default_value_t = 600.0, value_name = "SECS", help_heading = "Server")]
    pub request_timeout: f64,
    /// Retries of a failed request (connection error, timeout, HTTP 408/429/5xx)
    /// before the run fails
    #[arg(long, default_value_t = 8, value_name = "N", help_heading = "Server")]
    pub max_retries: u32,
    /// First retry delay in seconds; doubles per retry, capped at 10 s
    #[arg(long, default_value_t = 0.5, value_name = "SECS", help_heading = "Server")]
    pub retry_backoff: f64,
    /// LoRA adapter to generate with: every `/generate` request names it in
    /// `lora_path` (SGLang's field; the server must have it loaded, e.g.
    /// `arl-serve --lora-paths NAME=DIR` or `arl-sync --lora NAME`), so the
    /// recorded log-probs are the adapter's. Default: the base model.
    /// `--opponent-endpoint`'s requests do not name it
    #[arg(long, value_name = "NAME", help_heading = "Server")]
    pub lora: Option<String>,

    /// Model or tokenizer directory: `tokenizer.json`, the chat template
    /// (`chat_template.jinja`, else `chat_template` in `tokenizer_config.json`),
    /// `eos_token`, and the end-of-sequence ids of `generation_config.json`
    #[arg(long, value_name = "DIR", help_heading = "Model")]
    pub tokenizer: PathBuf,
    /// System message put first when a prompt has none
    #[arg(long, value_name = "TEXT", help_heading = "Model")]
    pub system: Option<String>,
    /// Tokenise the prompt text as is, without the chat template (no tools)
    #[arg(long, help_heading = "Model")]
    pub no_chat_template: bool,
    /// Variables for the chat template, a JSON object (vLLM's and SGLang's
    /// `--chat-template-kwargs`), e.g. `{"enable_thinking": false}` for Qwen3;
    /// every rendering gets them, the tool turns included
    #[arg(long, value_name = "JSON", help_heading = "Model")]
    pub chat_template_kwargs: Option<String>,
    /// How the model writes tool calls (SGLang's names): `qwen25` (also `qwen`, `hermes`), `llama3`, `mistral`
    #[arg(long, default_value = "qwen25", value_name = "NAME", help_heading = "Model",
          long_help = arl_chat::toolcall::PARSER_HELP)]
    pub tool_call_parser: arl_chat::toolcall::Parser,
    /// Tool header template for a chat template without a tool section (tools put in the system message)
    #[arg(long, value_name = "FILE", help_heading = "Model", long_help = arl_chat::tool_header::HEADER_HELP)]
    pub tool_header: Option<PathBuf>,
    /// When the tool header is used: `auto` (the template has no tool section), `on`, `off`
    #[arg(long, default_value = "auto", value_name = "MODE", env = "ARL_TOOL_HEADER_MODE", help_heading = "Model",
          long_help = arl_chat::tool_header::MODE_HELP)]
    pub tool_header_mode: arl_chat::tool_header::HeaderMode,

    /// Samples per prompt (the group size)
    #[arg(
        short = 'n',
        long = "n-samples-per-prompt",
        default_value_t = 1,
        value_name = "N",
        help_heading = "Sampling"
    )]
    pub n_samples_per_prompt: u32,
    /// Sampling temperature
    #[arg(long, default_value_t = 1.0, value_name = "T", help_heading = "Sampling")]
    pub temperature: f64,
    /// Nucleus sampling threshold
    #[arg(long, default_value_t = 1.0, value_name = "P", help_heading = "Sampling")]
    pub top_p: f64,
    /// Top-k sampling; -1 = whole vocabulary
    #[arg(long, default_value_t = -1, value_name = "K", allow_hyphen_values = true, help_heading = "Sampling")]
    pub top_k: i64,
    /// Most new tokens per turn; default: what is left of `--max-response-len`
    #[arg(long, value_name = "N", help_heading = "Sampling")]
    pub max_new_tokens: Option<u32>,
    /// Stop string (repeatable)
    #[arg(long, value_name = "TEXT", help_heading = "Sampling")]
    pub stop: Vec<String>,
    /// Stop token id (repeatable)
    #[arg(long, value_name = "ID", help_heading = "Sampling")]
    pub stop_token_ids: Vec<u32>,

    /// Most generation turns per episode
    #[arg(long, default_value_t = 8, value_name = "N", help_heading = "Episode")]
    pub max_turns: u32,
    /// Most response tokens per episode, tool tokens included
    #[arg(long, default_value_t = 4096, value_name = "N", help_heading = "Episode")]
    pub max_response_len: u32,
    /// Most characters of one tool output; longer ones are cut in the middle
    #[arg(long, default_value_t = 8000, value_name = "CHARS", help_heading = "Episode")]
    pub max_tool_output: usize,
    /// Per-record environments (JSON): named tool sets and limits, chosen by a
    /// record's `metadata.env` or its `data_source` (see `arl_rollout::env`)
    #[arg(long, value_name = "FILE", help_heading = "Episode")]
    pub env_config: Option<PathBuf>,

    /// Built-in tools to offer, comma-separated: `calculator`, `python`, `sql`
    /// (queries the task's own database, built per episode from `metadata.sql_setup`)
    #[arg(long, value_delimiter = ',', value_name = "LIST", help_heading = "Tools")]
    pub tools: Vec<String>,
    /// External tool: `sh -c COMMAND` gets `{"name", "arguments"}` as JSON on
    /// stdin and answers on stdout (`{"content": …}` or plain text); repeatable
    #[arg(long = "tool", value_name = "NAME=COMMAND", help_heading = "Tools")]
    pub external: Vec<String>,
    /// JSON file with OpenAI tool definitions (a list) for `--tool`s, replacing
    /// their default schema (an object with any arguments)
    #[arg(long, value_name = "FILE", help_heading = "Tools")]
    pub tool_spec: Option<PathBuf>,
    /// MCP server over stdio (`sh -c COMMAND`); all its tools are offered; repeatable
    #[arg(long, value_name = "COMMAND", help_heading = "Tools")]
    pub mcp: Vec<String>,
    /// SandboxFusion URL for the `python` tool (e.g. http://127.0.0.1:8080);
    /// default: the local sandbox (Linux namespaces, rlimits; see `arl-reward`)
    #[arg(long, value_name = "URL", help_heading = "Tools")]
    pub sandbox_url: Option<String>,
    /// Most local sandbox runs at once; default: the number of CPUs
    #[arg(long, value_name = "N", help_heading = "Tools")]
    pub sandbox_concurrency: Option<usize>,
    /// `python` keeps variables across calls within an episode, like a notebook kernel
    #[arg(long, help_heading = "Tools")]
    pub python_stateful: bool,
    /// OpenAPI 3 spec (URL or JSON file): every operation becomes a tool named
    /// by its `operationId`, called over HTTP; with `x-arl-episodes` (as
    /// `arl-env` serves) each episode gets its own state, its id in `metadata.episode_id`
    #[arg(long, value_name = "SPEC", help_heading = "Tools")]
    pub openapi: Option<String>,
    /// Web environment: the task site's URL (`arl-env`, e.g.
    /// http://127.0.0.1:8700); offers the browser tools `open`, `click`,
    /// `type`, `select`, `scroll`, `back` in a headless Chromium that reaches
    /// only this site; each episode gets its own site episode (from
    /// `metadata.web_setup`, id in `metadata.episode_id`) and browser context
    #[arg(long, value_name = "URL", help_heading = "Tools")]
    pub web: Option<String>,
    /// Web environment: most characters of one page observation
    #[arg(long, default_value_t = 4000, value_name = "CHARS", help_heading = "Tools")]
    pub web_max_chars: usize,
    /// Web environment: the Chromium binary; default `$ARL_CHROMIUM`, else
    /// `chromium`, `chromium-browser` or `google-chrome` on PATH
    #[arg(long, value_name = "PATH", help_heading = "Tools")]
    pub chromium: Option<PathBuf>,
    /// `sql` tool: PostgreSQL admin URL (`postgres://USER@HOST:PORT/DB`); each
    /// episode gets its own schema and a role that can only read it. Default:
    /// an in-memory SQLite database per episode
    #[arg(long, value_name = "URL", help_heading = "Tools")]
    pub sql_url: Option<String>,
    /// `sql` tool: time limit of one query, seconds
    #[arg(long, default_value_t = 5.0, value_name = "SECS", help_heading = "Tools")]
    pub sql_timeout: f64,
    /// `sql` tool: most rows returned to the model
    #[arg(long, default_value_t = 50, value_name = "N", help_heading = "Tools")]
    pub sql_max_rows: usize,
    /// Timeout of one tool call, in seconds
    #[arg(long, default_value_t = 30.0, value_name = "SECS", help_heading = "Tools")]
    pub tool_timeout: f64,

    /// Take the K-th batch of N prompts of a seeded shuffle, epoch after epoch
    /// (`prompt_id@<epoch>` from the second epoch on); default: every prompt once, in order
    #[arg(long, value_name = "N", help_heading = "Dataset walk")]
    pub batch_size: Option<usize>,
    /// Which batch (with `--batch-size`), counted from 0
    #[arg(long, default_value_t = 0, value_name = "K", help_heading = "Dataset walk")]
    pub step: u64,
    /// Shuffle seed (with `--batch-size`)
    #[arg(long, default_value_t = 0, value_name = "S", help_heading = "Dataset walk")]
    pub seed: u64,

    /// Score each trajectory inline with a rule reward of `arl-reward` (`math`,
    /// `exact`, `f1`), for single-process use; piping into `arl-reward` is the
    /// general form (sandboxed code tests, remote and plug-in rewards, shaping)
    /// (`game` scores arena games from their result with `arl-reward --rm game`'s defaults)
    #[arg(long, value_name = "NAME", value_parser = ["math", "exact", "f1", "game"], help_heading = "Reward")]
    pub rm: Option<String>,

    /// Arena mode: the input records are game tasks (`arl-tasks arena`:
    /// `metadata.game` = `tictactoe` or `connect4`, optional `metadata.opening`
    /// moves); each of the `-n` samples is one game between two seats, `x`
    /// (moves first) and `o`, playing in turn with the `move` tool
    /// (`{"cell": 1-9}` or `{"column": 1-7}`). Every game gives two records,
    /// `prompt_id` `<task id>:x` and `<task id>:o` (each seat's games form a
    /// group), `sample_index` the game, linked by `metadata.episode_id`, with
    /// the result in `metadata.arena` (seat, opponent, result, winner, reason,
    /// moves, final board); score them with `arl-reward --rm game`. A turn
    /// must hold exactly one legal `move` call; anything else is refused with
    /// an observation saying why, and after `--illegal-retries` refused
    /// attempts at one move the seat forfeits (as it does when its
    /// `--max-response-len` runs out). `--max-turns` and tool flags do not apply
    #[arg(long, help_heading = "Arena")]
    pub arena: bool,

    /// Arena: seat `o` is played by the policy behind this server (same
    /// tokenizer) instead of by the `--endpoint` policy itself (self-play);
    /// its records say `metadata.arena.player` = `opponent`
    #[arg(long, value_name = "URL", requires = "arena", help_heading = "Arena")]
    pub opponent_endpoint: Option<String>,

    /// Arena: refused attempts a seat may retry per move before it forfeits
    /// (0: the first illegal move forfeits)
    #[arg(long, default_value_t = 2, value_name = "N", help_heading = "Arena")]
    pub illegal_retries: u32,

    /// Over-sampling: stop when N groups are complete and abort the remaining
    /// requests (`/abort_request`); unfinished groups are not written
    #[arg(long, value_name = "N", help_heading = "Over-sampling")]
    pub target_groups: Option<u64>,
}

pub fn run(args: Args) -> Result<ExitCode> {
    arl_rollout::run(args.config()?)
}

impl Args {
    /// The run, with every flag combination checked.
    fn config(self) -> Result<Config> {
        if self.n_samples_per_prompt == 0 {
            return Err(usage("`-n` must be at least 1"));
        }
        if self.concurrency == 0 {
            return Err(usage("`--concurrency` must be at least 1"));
        }
        let has_tools = !self.tools.is_empty()
            || !self.external.is_empty()
            || !self.mcp.is_empty()
            || self.openapi.is_some()
            || self.env_config.is_some();
        if self.arena && has_tools {
            return Err(usage(
                "`--arena` offers only the game's `move` tool; drop `--tools`, `--tool`, `--mcp`, `--openapi` and `--env-config`",
            ));
        }
        if self.arena && self.no_chat_template {
            return Err(usage("`--arena` needs the chat template (moves are tool calls)"));
        }
        let output = self.output.spec();
        if self.trace.is_some() && self.trace == output.path {
            return Err(usage("`--trace` needs a file of its own, not the `-o` output"));
        }
        if self.resume && output.path.is_none() {
            return Err(usage("`--resume` needs `-o FILE`"));
        }
        if let Some(other) = self.tools.iter().find(|t| !["calculator", "python", "sql"].contains(&t.as_str())) {
            return Err(usage(format!("unknown built-in tool `{other}` (known: calculator, python, sql)")));
        }
        if let Some(spec) = self.external.iter().find(|s| !s.contains('=')) {
            return Err(usage(format!("`--tool {spec}`: expected NAME=COMMAND")));
        }
        if let Some(site) = self.web.as_ref().filter(|s| !(s.starts_with("http://") || s.starts_with("https://"))) {
            return Err(usage(format!("`--web {site}`: expected the task site's URL, e.g. http://127.0.0.1:8700")));
        }
        let secs = |flag: &str, s: f64| {
            Duration::try_from_secs_f64(s).map_err(|_| usage(format!("`--{flag} {s}`: expected a number of seconds")))
        };
        let endpoints = match (self.endpoint.is_empty(), &self.router) {
            (true, None) => vec!["http://127.0.0.1:30000".to_string()],
            _ => self.endpoint,
        };
        Ok(Config {
            input: self.input.spec()?,
            output,
            keys: self.dataset.keys(),
            resume: self.resume,
            trace: self.trace,
            endpoints,
            router: self.router,
            api_key: self.api_key,
            concurrency: self.concurrency,
            request_timeout: secs("request-timeout", self.request_timeout)?,
            max_retries: self.max_retries,
            retry_backoff: secs("retry-backoff", self.retry_backoff)?,
            lora: match self.lora {
                Some(l) if l.is_empty() => return Err(usage("`--lora` needs an adapter name")),
                l => l,
            },
            tokenizer: self.tokenizer,
            system: self.system,
            no_chat_template: self.no_chat_template,
            chat_template_kwargs: match &self.chat_template_kwargs {
                None => serde_json::Map::new(),
                Some(_) if self.no_chat_template => {
                    return Err(usage("`--chat-template-kwargs` needs the chat template (not `--no-chat-template`)"))
                }
                Some(text) => match serde_json::from_str::<serde_json::Value>(text) {
                    Ok(serde_json::Value::Object(m)) => m,
                    _ => {
                        return Err(usage(format!(
                            "`--chat-template-kwargs {text}`: expected a JSON object, e.g. '{{\"enable_thinking\": false}}'"
                        )))
                    }
                },
            },
            tool_call_parser: self.tool_call_parser,
            tool_header: self.tool_header,
            tool_header_mode: self.tool_header_mode,
            n_samples_per_prompt: self.n_samples_per_prompt,
            temperature: self.temperature,
            top_p: self.top_p,
            top_k: self.top_k,
            max_new_tokens: self.max_new_tokens,
            stop: self.stop,
            stop_token_ids: self.stop_token_ids,
            max_turns: self.max_turns,
            max_response_len: self.max_response_len,
            max_tool_output: self.max_tool_output,
            env_config: self.env_config,
            tools: self.tools,
            external: self.external,
            tool_spec: self.tool_spec,
            mcp: self.mcp,
            sandbox_url: self.sandbox_url,
            sandbox_concurrency: self.sandbox_concurrency,
            python_stateful: self.python_stateful,
            openapi: self.openapi,
            web: self.web,
            web_max_chars: self.web_max_chars,
            chromium: self.chromium,
            sql_url: self.sql_url,
            sql_timeout: secs("sql-timeout", self.sql_timeout)?,
            sql_max_rows: self.sql_max_rows,
            tool_timeout: secs("tool-timeout", self.tool_timeout)?,
            batch_size: self.batch_size,
            step: self.step,
            seed: self.seed,
            rm: self.rm,
            arena: self.arena,
            opponent_endpoint: self.opponent_endpoint,
            illegal_retries: self.illegal_retries,
            target_groups: self.target_groups,
        })
    }
}

fn main() -> std::process::ExitCode {
    arl_core::cli::main(TOOL, run)
}
