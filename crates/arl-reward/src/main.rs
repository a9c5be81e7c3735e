//! `arl-reward`: scores trajectories. Adds `reward` and `reward_detail` to
//! every record, in input order; everything else passes through unchanged.
use anyhow::{Context, Result};
use arl_core::args::{InputArgs, OutputArgs};
use arl_core::cli::{self, EXIT_CODES_HELP};
use arl_core::record::Record;
use arl_env::sandbox::{self, Backend, Limits, Sandbox};
use arl_reward::{
    self as reward, code::CodeOpts, external::CmdRm, math::MathOpts, remote::RemoteRm, FormatBonus, Overlong, Rm,
    Score, ScoreError, Spec,
};
use clap::{Parser, ValueEnum};
use std::collections::BTreeMap;
use std::process::ExitCode;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

pub const TOOL: &str = "arl-reward";

/// A reward function name.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum RmName {
    /// Last `\boxed{}` or `Answer:` line, normalised, compared by value; hedged answers score 0
    Math,
    /// The answer part equals the label (or one of a list of labels)
    Exact,
    /// SQuAD token F1 of the answer part against the label(s)
    F1,
    /// `--weight` when the response matches `--pattern` (a format reward)
    Regex,
    /// Run the last fenced code block against the label's tests in the sandbox; fraction passed
    Code,
    /// POST {prompt, response, label} to `--url`; the answer is a number or {"reward", "detail"}
    Remote,
    /// Execution match: the response's query (last ```sql block, else last `sql` tool call)
    /// returns the same rows as `label.gold` on the task's database
    Sql,
    /// Goal check in an OpenAPI environment service (`arl-env`): the state of the
    /// trajectory's `metadata.episode_id`, or a replay of the response's tool calls
    Api,
    /// Goal check on the web task site (`arl-env`): the state of the trajectory's
    /// `metadata.episode_id`, or a replay of the response's browser calls in headless Chromium
    Web,
    /// An external program: JSONL records in, one `{"reward", "detail"}` (or number) line out per record
    Cmd,
    /// Tool calls scored by the rules of BFCL's AST checker against `label.ground_truth`
    /// (`arl-tasks import bfcl:CATEGORY`); the no-call categories score 1 with no call
    Bfcl,
    /// The result of an arena game (`metadata.arena.result` of `arl-rollout --arena`):
    /// `--game-win`, `--game-draw`, `--game-loss`, `--game-forfeit`
    Game,
    /// Tournament-ranked rewards: the samples of each prompt meet in a
    /// `--arena round-robin` or `elimination` tournament decided by `--judge`
    Arena,
    /// Choose per record by `data_source` (`--map`, `--default-rm`)
    Auto,
}

/// Score trajectories: rule-based, sandboxed-test, remote and plug-in rewards
///
/// Every output record gets `reward` (f32) and `reward_detail` (JSON: the
/// reward function, the base score, what was extracted, normalised forms,
/// test outcomes, shaping terms), so a reward can be debugged later from the
/// file alone. Records keep the input order; rewards that wait (code, remote)
/// are computed `--concurrency` at a time.
///
/// A record that cannot be scored (no `response`, no usable `label`, an
/// unknown `data_source` under `auto`) is an error naming it, or a reject
/// under `--on-error skip --rejects FILE`.
///
/// `--rm math` reads the final answer: only the text after a thinking
/// section counts (`<think>…</think>`, `<thinking>`, `<reasoning>`; a
/// response still inside one has no answer), and in it the last
/// `\boxed{…}`, else the last `Answer:` line (`\( … \)`, `\[ … \]`,
/// `$ … $` around the answer removed). A model that corrects itself is graded
/// on its last box ("first \boxed{3}, but rechecking, \boxed{5}" reads 5);
/// boxes offered together — joined by nothing but punctuation, `and`, `or`,
/// `alternatively`, `maybe` — are one answer: a hedge if their values
/// differ, except that a label of that many items takes them as its items
/// (`\boxed{-2} and \boxed{1}` for `-2, 1`). A hedge scores 0 (as do `or`,
/// `\pm`, ranges and candidate lists inside one box); an empty `\boxed{}` is no answer. Values compare exactly (rationals), by value (irrationals,
/// expressions), or as normalised text; lists by their items, ordered when
/// bracketed; intervals by their ends and bracket kinds (`(1, 2)`, `[1, 2]`
/// and `[1, 2)` are three different answers).
///
/// `--rm auto` maps `data_source` to a function: built in are
/// arith, math, gsm8k, openai/gsm8k, math_dapo and the benchmarks of
/// `arl-tasks import` (math500, math-train, aime24, aime25-i) → math; code,
/// humaneval, mbpp → code; sql → sql; api → api and web → web;
/// `--map SRC=NAME` adds or overrides, `--default-rm` covers the rest.
/// tictactoe and connect4 (arena games) → game.
///
/// `--rm game` reads the game result that `arl-rollout --arena` writes to
/// `metadata.arena`: a win scores `--game-win` (1), a draw `--game-draw` (0),
/// a loss `--game-loss` (-1), a loss by this seat's own forfeit (illegal
/// moves, out of tokens) `--game-forfeit` (default: `--game-loss`). With the
/// defaults the two seats of a game sum to 0; `--game-draw 0.5 --game-loss 0`
/// makes them sum to 1.
///
/// `--rm arena` (tournament-ranked rewards, as in ArenaRL): the records of
/// each `prompt_id` (a group, at least two) meet in a tournament and a judge
/// decides each match. `--arena round-robin`: every pair once, reward =
/// (wins + ties/2) / (n-1), the win rate. `--arena elimination`: a
/// single-elimination bracket in input order (1 v 2, 3 v 4, …; an odd one out
/// gets a bye), reward = rounds advanced / ceil(log2 n), so the champion gets
/// 1 and first-round losers 0; a tied match is settled by a coin seeded with
/// `--arena-seed` and the prompt_id. A judge error (an unreadable verdict, an
/// HTTP failure) counts as a tie and is recorded in the match (`--judge-strict`
/// makes it fatal). `reward_detail` holds the rank, wins/ties/losses, the
/// group's ranking (sample indices, best first) and every match the record
/// played with the judge's answer.
///
/// Judges: `longer` / `shorter` (response length in characters), `score`
/// (the higher base score of `--judge-rm` against the label wins), `cmd`
/// (`--judge-cmd`, started once: one JSON line per match on stdin,
/// `{"prompt_id", "prompt", "label", "a", "b", "a_index", "b_index"}`; one line
/// back: `"a"`, `"b"`, `"tie"`, `{"winner": …}` or the probability that A is
/// better), `model` (`--judge-url`, an OpenAI-style `/v1/chat/completions`
/// server asked to end its reply with `[[A]]`, `[[B]]` or `[[tie]]`; the last
/// marker counts; `--judge-swap` asks both orders and calls a flip a tie).
///
/// `--rm code` runs the response's last fenced code block against the label's
/// tests in the local sandbox (or SandboxFusion, `--sandbox-fusion-url`). The
/// local sandbox is bubblewrap: fresh pid, network, IPC, hostname, mount and
/// cgroup namespaces, a read-only view of the system and nothing of the host's
/// files, an empty scratch directory, rlimits and a wall-clock timeout. Where
/// bubblewrap cannot be used (not installed, or unable to make namespaces
/// here) it falls back to bare Linux namespaces — no pid namespace, no private
/// root filesystem, no cgroup namespace — and says so: a warning on stderr,
/// once, and in every record `reward_detail.sandbox` = `{"isolation":
/// "namespaces", "degraded": true, "missing": [...], "landlock": {...}}`
/// (under bubblewrap `{"isolation": "bwrap"}`). On kernels with Landlock the
/// fallback lets the code read and execute only the system directories
/// (/usr, /etc, /bin, /lib…), write only its scratch directory, and (ABI 6
/// on) signal only its own processes: `"landlock": {"enforced": true, "abi":
/// N}`; without Landlock (`"enforced": false, "why": ...`) the code can read
/// whatever its user can. `--sandbox strict` refuses to run on the fallback.
/// `ARL_SANDBOX_NO_BWRAP=1` acts as if bubblewrap were missing and
/// `ARL_SANDBOX_NO_LANDLOCK=1` as if the kernel had no Landlock.
///
/// Parquet by columns: with a reward that reads a known set of fields (math,
/// exact, f1, regex, code, and auto over them), when the input is one Parquet
/// file with arl's columns and the output is Parquet, only those fields (and
/// the shaping's: `metadata`, `tool_calls`, `tokens`/`prompt_len` for
/// --max-response-len) are decoded; the other columns are copied into the
/// output undecoded, and `reward`/`reward_detail` encoded alongside. Fields
/// not read are not checked; a corrupt column chunk copied undecoded fails
/// its first reader. `ARL_NO_PASS_THROUGH=1` reads and writes whole records.
#[derive(Debug, Parser)]
#[command(name = "arl-reward", version, after_long_help = EXIT_CODES_HELP)]
pub struct Args {
    /// Reward function
    #[arg(long, value_enum, value_name = "NAME", help_heading = "Reward")]
    pub rm: RmName,

    /// With `--rm auto`: route `data_source` SRC to reward NAME (repeatable)
    #[arg(long = "map", value_name = "SRC=NAME", help_heading = "Reward")]
    pub map: Vec<String>,

    /// With `--rm auto`: the reward for a `data_source` not in the mapping
    /// (default: none, such records are errors)
    #[arg(long, value_enum, value_name = "NAME", help_heading = "Reward")]
    pub default_rm: Option<RmName>,

    /// Print to stderr, per record, a short account of why it got its reward
    #[arg(long, help_heading = "Reward")]
    pub explain: bool,

    /// Print the time spent reading, scoring and writing on stderr
    #[arg(long)]
    pub timings: bool,

    /// math: relative tolerance for numbers (0 = exact comparison of rationals)
    #[arg(long, default_value_t = 0.0, value_name = "TOL", help_heading = "math")]
    pub tolerance: f64,

    /// math: partial credit W (0 < W < 1) for a response with neither `\boxed{}` nor an
    /// `Answer:` line whose last number equals the label — a denser reward for a model that
    /// answers in its own words; accuracy (`reward_detail.score` ≥ 1) counts full credit only
    #[arg(long, default_value_t = 0.0, value_name = "W", help_heading = "math")]
    pub last_number_credit: f64,

    /// regex: the pattern (Rust regex syntax)
    #[arg(long, value_name = "REGEX", help_heading = "regex")]
    pub pattern: Option<String>,

    /// regex: the reward for a match
    #[arg(long, default_value_t = 1.0, value_name = "W", help_heading = "regex")]
    pub weight: f32,

    /// code: time limit of one test or one stdin/stdout case, seconds
    #[arg(long, default_value_t = 5.0, value_name = "SECS", help_heading = "code")]
    pub test_timeout: f64,

    /// code: memory limit of the sandbox (address space), MiB
    #[arg(long, default_value_t = 1024, value_name = "MB", help_heading = "code")]
    pub memory_mb: u64,

    /// code: run tests in a SandboxFusion server (base URL or the full
    /// `/run_code` URL) instead of the local sandbox
    #[arg(long, value_name = "URL", help_heading = "code")]
    pub sandbox_fusion_url: Option<String>,

    /// code: how strict the local sandbox is: `auto` runs on bare namespaces
    /// (with a warning) where bubblewrap cannot be used, `strict` refuses to
    /// run there (exit 1), `namespaces` uses that fallback even where
    /// bubblewrap works
    #[arg(long, value_enum, default_value_t = SandboxMode::Auto, env = "ARL_SANDBOX", value_name = "MODE",
          help_heading = "code")]
    pub sandbox: SandboxMode,

    /// Records (or sandboxes) scored at once, for rewards that wait (code, remote)
    #[arg(long, default_value_t = 8, value_name = "N", help_heading = "Concurrency")]
    pub concurrency: usize,

    /// remote: the scorer's URL
    #[arg(long, value_name = "URL", help_heading = "remote")]
    pub url: Option<String>,

    /// remote (and SandboxFusion): timeout of one request, seconds
    #[arg(long, default_value_t = 30.0, value_name = "SECS", help_heading = "remote")]
    pub timeout: f64,

    /// remote (and SandboxFusion): attempts per request (transport errors and HTTP 5xx are retried)
    #[arg(long, default_value_t = 3, value_name = "N", help_heading = "remote")]
    pub retries: u32,

    /// sql, api, web: how the model wrote its tool calls (SGLang's names, as given to
    /// `arl-rollout`): `qwen25` (also `qwen`, `hermes`), `llama3`, `mistral`
    #[arg(long, default_value = "qwen25", value_name = "NAME", help_heading = "sql",
          long_help = arl_chat::toolcall::PARSER_HELP)]
    pub tool_call_parser: arl_chat::toolcall::Parser,

    /// sql: PostgreSQL admin URL; each record gets its own schema and a
    /// read-only role (default: an in-memory SQLite database per record)
    #[arg(long, value_name = "URL", help_heading = "sql")]
    pub sql_url: Option<String>,

    /// sql: time limit of one query, seconds
    #[arg(long, default_value_t = 5.0, value_name = "SECS", help_heading = "sql")]
    pub sql_timeout: f64,

    /// api: the service's OpenAPI spec (URL or file), as given to `arl-rollout --openapi`
    #[arg(long, value_name = "SPEC", help_heading = "api")]
    pub openapi: Option<String>,

    /// cmd: the program, run with `sh -c`
    #[arg(long = "cmd", value_name = "COMMAND", help_heading = "cmd")]
    pub command: Option<String>,

    /// cmd: send one group (records sharing `prompt_id`) per line as a JSON
    /// array; the program answers one JSON array of rewards per group
    #[arg(long, help_heading = "cmd")]
    pub by_group: bool,

    /// DAPO soft overlong punishment: the response length limit, tokens
    /// (`len(tokens) - prompt_len`); off when not given
    #[arg(long, value_name = "TOKENS", help_heading = "Shaping")]
    pub max_response_len: Option<u32>,

    /// DAPO: the penalty grows linearly over the last TOKENS before `--max-response-len`
    #[arg(long, default_value_t = 0, value_name = "TOKENS", help_heading = "Shaping")]
    pub overlong_buffer: u32,

    /// DAPO: the penalty at and beyond `--max-response-len`
    #[arg(long, default_value_t = 1.0, value_name = "F", help_heading = "Shaping")]
    pub overlong_penalty_factor: f32,

    /// Format bonus: added when the response matches `--format-pattern`
    #[arg(long, default_value_t = 0.0, value_name = "B", help_heading = "Shaping")]
    pub format_bonus: f32,

    /// Format bonus: the pattern (e.g. `(?s)<think>.*</think>.*\\boxed`)
    #[arg(long, value_name = "REGEX", help_heading = "Shaping")]
    pub format_pattern: Option<String>,

    /// game: the reward of a win
    #[arg(long, default_value_t = 1.0, value_name = "R", allow_hyphen_values = true, help_heading = "game")]
    pub game_win: f32,

    /// game: the reward of a draw
    #[arg(long, default_value_t = 0.0, value_name = "R", allow_hyphen_values = true, help_heading = "game")]
    pub game_draw: f32,

    /// game: the reward of a loss
    #[arg(long, default_value_t = -1.0, value_name = "R", allow_hyphen_values = true, help_heading = "game")]
    pub game_loss: f32,

    /// game: the reward of a loss by this seat's forfeit; default: `--game-loss`
    #[arg(long, value_name = "R", allow_hyphen_values = true, help_heading = "game")]
    pub game_forfeit: Option<f32>,

    /// arena: the tournament format
    #[arg(long = "arena", value_enum, default_value_t = ArenaFormat::RoundRobin, value_name = "FORMAT", help_heading = "arena")]
    pub arena_format: ArenaFormat,

    /// arena: who decides a match
    #[arg(long, value_enum, default_value_t = JudgeKind::Score, value_name = "JUDGE", help_heading = "arena")]
    pub judge: JudgeKind,

    /// arena, `--judge score`: the reward function whose base score decides (math, exact, f1, regex)
    #[arg(long, value_enum, default_value_t = RmName::Exact, value_name = "NAME", help_heading = "arena")]
    pub judge_rm: RmName,

    /// arena, `--judge cmd`: the judge program, run once with `sh -c`
    #[arg(long, value_name = "COMMAND", help_heading = "arena")]
    pub judge_cmd: Option<String>,

    /// arena, `--judge model`: the judge server (base URL, or the full `/v1/chat/completions` URL)
    #[arg(long, value_name = "URL", help_heading = "arena")]
    pub judge_url: Option<String>,

    /// arena, `--judge model`: the `model` field of the request
    #[arg(long, default_value = "default", value_name = "NAME", help_heading = "arena")]
    pub judge_model: String,

    /// arena, `--judge model`: most tokens of the judge's reply
    #[arg(long, default_value_t = 512, value_name = "N", help_heading = "arena")]
    pub judge_max_tokens: u32,

    /// arena, `--judge model`: sent as `Authorization: Bearer KEY`
    #[arg(long, env = "ARL_JUDGE_API_KEY", value_name = "KEY", hide_env_values = true, help_heading = "arena")]
    pub judge_api_key: Option<String>,

    /// arena, `--judge model`: ask both orders (A/B and B/A); a verdict that flips is a tie
    #[arg(long, help_heading = "arena")]
    pub judge_swap: bool,

    /// arena: a judge error fails the run instead of counting as a tie
    #[arg(long, help_heading = "arena")]
    pub judge_strict: bool,

    /// arena: seed of the elimination tie-break coins
    #[arg(long, default_value_t = 0, value_name = "S", help_heading = "arena")]
    pub arena_seed: u64,
    /// web: the task site's URL (`arl-env`), as given to `arl-rollout --web`
    #[arg(long, value_name = "URL", help_heading = "web")]
    pub web: Option<String>,

    /// web: the Chromium binary for replays; default `$ARL_CHROMIUM`, else
    /// `chromium`, `chromium-browser` or `google-chrome` on PATH
    #[arg(long, value_name = "PATH", help_heading = "web")]
    pub chromium: Option<std::path::PathBuf>,

    #[command(flatten)]
    pub input: InputArgs,
    #[command(flatten)]
    pub output: OutputArgs,
}

/// The local sandbox's isolation (`--sandbox`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum SandboxMode {
    /// Bubblewrap when it works here, else bare namespaces (+ Landlock), said on stderr and in `reward_detail.sandbox`
    Auto,
    /// Bubblewrap, or refuse to run (exit 1) before reading any record
    Strict,
    /// Bare namespaces (+ Landlock) even where bubblewrap works
    Namespaces,
}

/// A tournament format of `--rm arena`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum ArenaFormat {
    /// Every pair meets once; reward = win rate
    RoundRobin,
    /// Single-elimination bracket; reward = rounds advanced / rounds
    Elimination,
}

/// The judge of `--rm arena`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum JudgeKind {
    /// The longer response wins (characters); equal lengths tie
    Longer,
    /// The shorter response wins
    Shorter,
    /// The higher base score of `--judge-rm` (against the label) wins
    Score,
    /// An external program (`--judge-cmd`)
    Cmd,
    /// A model behind an OpenAI-style endpoint (`--judge-url`)
    Model,
}

const DEFAULT_MAP: &[(&str, RmName)] = &[
    ("arith", RmName::Math),
    ("math", RmName::Math),
    ("gsm8k", RmName::Math),
    ("openai/gsm8k", RmName::Math),
    ("math_dapo", RmName::Math),
    ("math500", RmName::Math),
    ("math-train", RmName::Math),
    ("aime24", RmName::Math),
    ("aime25-i", RmName::Math),
    ("code", RmName::Code),
    ("humaneval", RmName::Code),
    ("mbpp", RmName::Code),
    ("sql", RmName::Sql),
    ("api", RmName::Api),
    ("tictactoe", RmName::Game),
    ("connect4", RmName::Game),
    ("web", RmName::Web),
    ("bfcl", RmName::Bfcl),
];

fn build_rm(a: &Args, name: RmName) -> Result<Rm> {
    Ok(match name {
        RmName::Math => Rm::Math(MathOpts { tolerance: a.tolerance, last_number_credit: a.last_number_credit }),
        RmName::Exact => Rm::Exact,
        RmName::F1 => Rm::F1,
        RmName::Regex => {
            let p = a.pattern.as_deref().ok_or_else(|| cli::usage("`--rm regex` needs `--pattern REGEX`"))?;
            Rm::Regex {
                pattern: regex::Regex::new(p).map_err(|e| cli::usage(format!("`--pattern`: {e}")))?,
                weight: a.weight,
            }
        }
        RmName::Code => {
            Rm::Code(CodeOpts { test_timeout: Duration::from_secs_f64(a.test_timeout), memory_mb: a.memory_mb })
        }
        RmName::Remote => {
            let u = a.url.as_deref().ok_or_else(|| cli::usage("`--rm remote` needs `--url URL`"))?;
            Rm::Remote(
                RemoteRm::new(u, Duration::from_secs_f64(a.timeout), a.retries)
                    .map_err(|e| cli::usage(format!("{e}")))?,
            )
        }
        RmName::Sql => Rm::Sql(reward::sql::SqlOpts {
            backend: arl_env::sql::Backend::from_url(a.sql_url.as_deref())
                .map_err(|e| cli::usage(format!("`--sql-url`: {e}")))?,
            timeout: Duration::from_secs_f64(a.sql_timeout),
            parser: a.tool_call_parser,
            ..Default::default()
        }),
        RmName::Api => {
            let spec = a.openapi.as_deref().ok_or_else(|| cli::usage("`--rm api` needs `--openapi SPEC`"))?;
            let api =
                arl_env::tools::openapi::OpenApi::load(spec).map_err(|e| cli::usage(format!("`--openapi`: {e:#}")))?;
            let client = arl_env::tools::openapi::BlockingApi::new(api, Duration::from_secs_f64(a.timeout))?;
            Rm::Api(reward::api::ApiOpts { client: std::sync::Arc::new(client), parser: a.tool_call_parser })
        }
        RmName::Bfcl => Rm::Bfcl(reward::bfcl::BfclOpts { parser: a.tool_call_parser }),
        RmName::Game => Rm::Game(reward::arena::GameOpts {
            win: a.game_win,
            draw: a.game_draw,
            loss: a.game_loss,
            forfeit: a.game_forfeit.unwrap_or(a.game_loss),
        }),
        RmName::Web => {
            let site = a.web.as_deref().ok_or_else(|| {
                cli::usage("`--rm web` needs `--web URL` (the task site, as given to `arl-rollout --web`)")
            })?;
            let origin = arl_env::web::origin_of(site)
                .ok_or_else(|| cli::usage(format!("`--web {site}`: expected a URL such as http://127.0.0.1:8700")))?
                .to_string();
            let timeout = Duration::from_secs_f64(a.timeout);
            let hostport = origin.split_once("://").map_or(origin.as_str(), |(_, h)| h).to_string();
            let launch = a
                .chromium
                .clone()
                .or_else(arl_env::web::cdp::find_chromium)
                .map(|chromium| arl_env::web::cdp::LaunchOpts { chromium, allow: vec![hostport], timeout });
            let mut web = reward::web::WebOpts::new(&origin, launch, timeout)?;
            web.parser = a.tool_call_parser;
            Rm::Web(std::sync::Arc::new(web))
        }
        RmName::Cmd => return Err(cli::usage("`cmd` cannot be chosen per record; use `--rm cmd` on its own")),
        RmName::Arena => {
            return Err(cli::usage(
                "`arena` ranks whole groups and cannot be chosen per record; use `--rm arena` on its own",
            ))
        }
        RmName::Auto => return Err(cli::usage("`auto` cannot map to `auto`")),
    })
}

fn needs_sandbox(rm: &Rm) -> bool {
    match rm {
        Rm::Code(_) => true,
        Rm::Auto { map, default } => {
            map.values().any(|r| needs_sandbox(r)) || default.as_ref().is_some_and(|r| needs_sandbox(r))
        }
        _ => false,
    }
}

fn parse_name(s: &str) -> Result<RmName> {
    RmName::from_str(s, true).map_err(|_| cli::usage(format!("`--map`: unknown reward `{s}`")))
}

fn build_spec(a: &Args) -> Result<Option<Spec>> {
    let rm = match a.rm {
        RmName::Cmd | RmName::Arena => None,
        RmName::Auto => {
            let mut names: BTreeMap<String, RmName> = DEFAULT_MAP.iter().map(|(k, v)| (k.to_string(), *v)).collect();
            for m in &a.map {
                let (k, v) = m.split_once('=').ok_or_else(|| cli::usage(format!("`--map {m}`: expected SRC=NAME")))?;
                names.insert(k.to_string(), parse_name(v)?);
            }
            // Only build what can be used (a mapping to `regex` without a pattern is fine if unused... but be strict: all must build).
            let mut map = BTreeMap::new();
            for (k, v) in names {
                match build_rm(a, v) {
                    Ok(rm) => {
                        map.insert(k, Box::new(rm));
                    }
                    // Built-in routes to rewards that need flags not given stay out.
                    Err(_) if DEFAULT_MAP.iter().any(|(d, n)| *d == k && *n == v) => {}
                    Err(e) => return Err(e),
                }
            }
            let default = a.default_rm.map(|d| build_rm(a, d)).transpose()?.map(Box::new);
            Some(Rm::Auto { map, default })
        }
        n => Some(build_rm(a, n)?),
    };
    let Some(rm) = rm else { return Ok(None) };
    let mut spec = Spec::new(rm);
    if needs_sandbox(&spec.rm) {
        let limits =
            Limits { memory_mb: a.memory_mb, timeout: Duration::from_secs_f64(a.test_timeout), ..Limits::default() };
        let backend = match &a.sandbox_fusion_url {
            Some(_) if a.sandbox == SandboxMode::Namespaces => {
                return Err(cli::usage("`--sandbox namespaces` is for the local sandbox, not `--sandbox-fusion-url`"))
            }
            Some(u) => Backend::Remote(
                sandbox::remote::RemoteConfig::new(u, a.retries).map_err(|e| cli::usage(format!("{e}")))?,
            ),
            None => Backend::Local(local_sandbox(a.sandbox)?),
        };
        spec.sandbox = Some(Sandbox::new(backend, limits, a.concurrency));
    }
    spec.overlong = overlong(a)?;
    spec.format = format_bonus(a)?;
    Ok(Some(spec))
}

/// The local sandbox for `--sandbox MODE`; `strict` fails here, before any
/// record is read, when only the degraded fallback is available.
fn local_sandbox(mode: SandboxMode) -> Result<sandbox::local::LocalConfig> {
    use sandbox::local::{Isolation, LocalConfig};
    let mut cfg = LocalConfig::default();
    match mode {
        SandboxMode::Auto => {}
        SandboxMode::Namespaces => cfg.isolation = Some(Isolation::Unshare),
        SandboxMode::Strict => cfg.require_full().map_err(|e| {
            cli::hint(
                e.context("`--sandbox strict`: refusing to run code in a degraded sandbox"),
                "install bubblewrap (`scripts/setup.sh` does), or accept the fallback with `--sandbox auto` \
                 (records then say `\"isolation\": \"namespaces\"` in `reward_detail.sandbox`)",
            )
        })?,
    }
    Ok(cfg)
}

fn overlong(a: &Args) -> Result<Option<Overlong>> {
    match a.max_response_len {
        None if a.overlong_buffer > 0 => Err(cli::usage("`--overlong-buffer` needs `--max-response-len`")),
        None => Ok(None),
        Some(m) if a.overlong_buffer > m => Err(cli::usage("`--overlong-buffer` is larger than `--max-response-len`")),
        Some(m) => Ok(Some(Overlong { max_len: m, buffer: a.overlong_buffer, factor: a.overlong_penalty_factor })),
    }
}

fn format_bonus(a: &Args) -> Result<Option<FormatBonus>> {
    match &a.format_pattern {
        None if a.format_bonus != 0.0 => Err(cli::usage("`--format-bonus` needs `--format-pattern`")),
        None => Ok(None),
        Some(p) => Ok(Some(FormatBonus {
            pattern: regex::Regex::new(p).map_err(|e| cli::usage(format!("`--format-pattern`: {e}")))?,
            bonus: a.format_bonus,
        })),
    }
}

/// Scores a batch, concurrently when the reward waits; results in input order.
fn score_batch(spec: &Spec, recs: &[Record], concurrency: usize) -> Vec<Result<Score, ScoreError>> {
    let workers = if spec.rm.waits() { concurrency.max(1) } else { rayon::current_num_threads() };
    if workers <= 1 || recs.len() <= 1 {
        return recs.iter().map(|r| reward::score(spec, r)).collect();
    }
    let next = AtomicUsize::new(0);
    let mut out: Vec<Option<Result<Score, ScoreError>>> = (0..recs.len()).map(|_| None).collect();
    let slots: Vec<std::sync::Mutex<&mut Option<Result<Score, ScoreError>>>> =
        out.iter_mut().map(std::sync::Mutex::new).collect();
    std::thread::scope(|s| {
        for _ in 0..workers.min(recs.len()) {
            s.spawn(|| loop {
                let i = next.fetch_add(1, Ordering::Relaxed);
                if i >= recs.len() {
                    break;
                }
                let r = reward::score(spec, &recs[i]);
                if let Ok(mut g) = slots[i].lock() {
                    **g = Some(r);
                }
            });
        }
    });
    drop(slots);
    out.into_iter().map(|x| x.unwrap_or_else(|| Err(ScoreError("internal: not scored".into())))).collect()
}

fn who(r: &Record, pos: &arl_core::io::Pos) -> String {
    match (&r.prompt_id, r.sample_index) {
        (Some(p), Some(k)) => format!("{p}#{k}"),
        (Some(p), None) => p.clone(),
        _ => pos.to_string(),
    }
}

fn build_judge(a: &Args) -> Result<reward::arena::Judge> {
    use reward::arena::{CmdJudge, Judge, ModelJudge};
    Ok(match a.judge {
        JudgeKind::Longer => Judge::Longer,
        JudgeKind::Shorter => Judge::Shorter,
        JudgeKind::Score => match a.judge_rm {
            RmName::Math | RmName::Exact | RmName::F1 | RmName::Regex => {
                let rm = build_rm(a, a.judge_rm)?;
                Judge::Score(Box::new(move |r| reward::base_score(&rm, None, r)))
            }
            _ => return Err(cli::usage("`--judge-rm`: a judge score must be a rule reward (math, exact, f1, regex)")),
        },
        JudgeKind::Cmd => {
            let c = a.judge_cmd.as_deref().ok_or_else(|| cli::usage("`--judge cmd` needs `--judge-cmd COMMAND`"))?;
            Judge::Cmd(CmdJudge::start(c)?)
        }
        JudgeKind::Model => {
            let u = a.judge_url.as_deref().ok_or_else(|| cli::usage("`--judge model` needs `--judge-url URL`"))?;
            Judge::Model(ModelJudge::new(
                u,
                &a.judge_model,
                a.judge_max_tokens,
                a.judge_swap,
                Duration::from_secs_f64(a.timeout),
                a.judge_api_key.clone(),
            )?)
        }
    })
}

pub fn run(a: Args) -> Result<ExitCode> {
    if a.concurrency == 0 {
        return Err(cli::usage("`--concurrency` must be at least 1"));
    }
    if !(0.0..1.0).contains(&a.last_number_credit) {
        return Err(cli::usage(format!(
            "`--last-number-credit {}`: expected 0 ≤ W < 1 (full credit is for an answer the grader reads)",
            a.last_number_credit
        )));
    }
    let spec = build_spec(&a)?;
    // A reward that reads a known set of fields decodes only those from
    // Parquet; the output's other columns pass through.
    let (mut inp, mut out) = match spec.as_ref().and_then(reward::reads) {
        Some(reads) => {
            cli::Input::open_columns(&a.input.spec()?, &a.output.spec(), &reads, &["reward", "reward_detail"])?
        }
        None => (cli::Input::open(&a.input.spec()?)?, a.output.spec().open()?),
    };
    let pb = cli::progress(a.input.quiet, None, "records");
    let mut scored = 0u64;
    let mut sum = 0f64;
    let mut emit = |inp: &mut cli::Input,
                    out: &mut arl_core::io::RecordWriter,
                    batch: Vec<(arl_core::io::Pos, Record)>,
                    results: Vec<Result<Score, ScoreError>>|
     -> Result<()> {
        for ((pos, mut r), res) in batch.into_iter().zip(results) {
            match res {
                Ok(s) => {
                    if a.explain {
                        eprintln!("{}: reward {:.4}: {}", who(&r, &pos), s.reward, s.explain);
                    }
                    sum += s.reward as f64;
                    scored += 1;
                    r.reward = Some(s.reward);
                    r.reward_detail = Some(s.detail);
                    out.write_owned(r)?;
                }
                Err(e) => inp.reject(&pos, &r, e)?,
            }
            pb.inc(1);
        }
        out.flush()
    };
    let (mut t_read, mut t_score, mut t_write) = (Duration::ZERO, Duration::ZERO, Duration::ZERO);
    match &spec {
        Some(spec) => loop {
            let t = Instant::now();
            let Some(batch) = inp.next_batch()? else { break };
            let recs: Vec<Record> = batch.iter().map(|(_, r)| r.clone()).collect();
            let t1 = Instant::now();
            let res = score_batch(spec, &recs, a.concurrency);
            let t2 = Instant::now();
            emit(&mut inp, &mut out, batch, res)?;
            (t_read, t_score, t_write) = (t_read + (t1 - t), t_score + (t2 - t1), t_write + t2.elapsed());
        },
        None if a.rm == RmName::Arena => {
            let mut judge = build_judge(&a)?;
            let batch = inp.read_all()?;
            let recs: Vec<Record> = batch.iter().map(|(_, r)| r.clone()).collect();
            let format = match a.arena_format {
                ArenaFormat::RoundRobin => arl_env::arena::tournament::Format::RoundRobin,
                ArenaFormat::Elimination => arl_env::arena::tournament::Format::Elimination,
            };
            let raw = reward::arena::score_groups(format, &mut judge, &recs, a.arena_seed, a.judge_strict)?;
            if let reward::arena::Judge::Cmd(c) = judge {
                c.finish()?;
            }
            let shaping = Spec { rm: Rm::Exact, sandbox: None, overlong: overlong(&a)?, format: format_bonus(&a)? };
            let res =
                raw.into_iter().zip(&recs).map(|(s, r)| s.map(|s| reward::shape(&shaping, r, s, "arena"))).collect();
            emit(&mut inp, &mut out, batch, res)?;
        }
        None => {
            let command = a.command.clone().ok_or_else(|| cli::usage("`--rm cmd` needs `--cmd COMMAND`"))?;
            let batch = inp.read_all()?;
            let recs: Vec<Record> = batch.iter().map(|(_, r)| r.clone()).collect();
            let c = CmdRm { command, by_group: a.by_group };
            let raw = reward::external::score_all(&c, &recs)?;
            // Shaping applies to cmd rewards too.
            let shaping = Spec { rm: Rm::Exact, sandbox: None, overlong: overlong(&a)?, format: format_bonus(&a)? };
            let res =
                raw.into_iter().zip(&recs).map(|(s, r)| s.map(|s| reward::shape(&shaping, r, s, "cmd"))).collect();
            emit(&mut inp, &mut out, batch, res)?;
        }
    }
    pb.finish_and_clear();
    let written = out.count();
    let t = Instant::now();
    out.finish().context("writing output")?;
    t_write += t.elapsed();
    if a.timings {
        eprintln!(
            "{TOOL}: timings: read {:.3} s, score {:.3} s ({} threads), write {:.3} s",
            t_read.as_secs_f64(),
            t_score.as_secs_f64(),
            rayon::current_num_threads(),
            t_write.as_secs_f64()
        );
    }
    if !a.input.quiet && scored > 0 && a.explain {
        eprintln!("{TOOL}: {scored} records scored, mean reward {:.4}", sum / scored as f64);
    }
    inp.finish(TOOL, written)?;
    Ok(ExitCode::SUCCESS)
}

fn main() -> std::process::ExitCode {
    arl_core::cli::main(TOOL, run)
}
