//! The rollout engine behind `arl-rollout`: the deterministic dataset walk,
//! group scheduling over a single-threaded async runtime, output with
//! `NAME.partial` and `--resume`, over-sampling with aborts.
//!
//! A group (the `-n` samples of one prompt) is placed on one endpoint and its
//! episodes run concurrently; at most `--concurrency` requests are in flight
//! overall, and enough groups are active to keep that many busy. A group is
//! written only when all its samples are done, so a killed run never leaves a
//! half group behind.
pub mod answer;
pub mod arena;
pub mod client;
pub mod config;
pub mod env;
pub mod episode;
pub mod output;
pub mod trace;

pub use crate::config::{Config, TOOL};
use anyhow::{Context, Result};
use arl_chat::tokenizer::Tokenizer;
use arl_core::cli::{self, Input};
use arl_core::record::Record;
use arl_env::tools::{self, Registry, Tool, ToolImpl};
use client::{Client, ClientConfig, GenError};
use episode::{Episode, Shared};
use serde_json::{json, Value};
use std::collections::HashMap;
use std::process::ExitCode;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Instant;

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
struct Job {
    idx: usize,
    epoch: u64,
    prompt_ids: Arc<[u32]>,
    env: Arc<env::Env>,
}

/// A started group: the prompt's record and what it runs with.
struct Group {
    rec: Record,
    prompt_ids: Arc<[u32]>,
    env: Arc<env::Env>,
}

fn build_registry(cfg: &Config) -> Result<Registry> {
    let mut reg = Registry::default();
    let timeout = cfg.tool_timeout;
    for t in &cfg.tools {
        match t.as_str() {
            "calculator" => {
                reg.add(Tool { name: t.clone(), definition: tools::calculator_def(), imp: ToolImpl::Calculator })?
            }
            "python" => {
                let limits = arl_env::sandbox::Limits { timeout, ..Default::default() };
                let sandbox = match &cfg.sandbox_url {
                    Some(url) => arl_env::sandbox::Sandbox::new(
                        arl_env::sandbox::Backend::Remote(arl_env::sandbox::remote::RemoteConfig::new(url, 3)?),
                        limits,
                        cfg.concurrency,
                    ),
                    None => arl_env::sandbox::Sandbox::local(
                        limits,
                        cfg.sandbox_concurrency
                            .unwrap_or_else(|| std::thread::available_parallelism().map_or(4, |n| n.get())),
                    ),
                };
                let py = tools::python::Python {
                    sandbox,
                    stateful: cfg.python_stateful,
                    remote_url: cfg.sandbox_url.clone(),
                    run_timeout: timeout,
                    http: arl_http::client::builder().build().context("HTTP client")?,
                };
                reg.add(Tool { name: t.clone(), definition: tools::python_def(), imp: ToolImpl::Python(Arc::new(py)) })?
            }
            "sql" => {
                let backend = arl_env::sql::Backend::from_url(cfg.sql_url.as_deref())
                    .map_err(|e| cli::usage(format!("`--sql-url`: {e}")))?;
                let limits = arl_env::sql::Limits { timeout: cfg.sql_timeout, max_rows: cfg.sql_max_rows };
                reg.add(Tool {
                    name: t.clone(),
                    definition: tools::sql_def(cfg.sql_max_rows),
                    imp: ToolImpl::Sql(Arc::new(tools::sql::SqlTool { backend, limits })),
                })?
            }
            other => {
                return Err(cli::usage(format!("unknown built-in tool `{other}` (known: calculator, python, sql)")))
            }
        }
    }
    if let Some(src) = &cfg.openapi {
        let api = tools::openapi::OpenApi::load(src).map_err(|e| cli::usage(format!("`--openapi`: {e:#}")))?;
        let http = arl_http::client::builder().timeout(timeout).build().context("HTTP client")?;
        let ops: Vec<(String, Value)> = api.ops.iter().map(|o| (o.id.clone(), o.definition.clone())).collect();
        let tool = Arc::new(tools::openapi::OpenApiTool { api, http });
        for (name, definition) in ops {
            reg.add(Tool { name, definition, imp: ToolImpl::OpenApi(tool.clone()) })?;
        }
    }
    if let Some(site) = &cfg.web {
        if !(site.starts_with("http://") || site.starts_with("https://")) {
            return Err(cli::usage(format!(
                "`--web {site}`: expected the task site's URL, e.g. http://127.0.0.1:8700"
            )));
        }
        let chromium = match &cfg.chromium {
            Some(p) => p.clone(),
            None => arl_env::web::cdp::find_chromium().ok_or_else(|| {
                cli::hint(
                    cli::usage("`--web`: no Chromium found (chromium, chromium-browser or google-chrome on PATH)"),
                    "install it (scripts/setup.sh installs Debian's `chromium`) or pass `--chromium PATH`",
                )
            })?,
        };
        let origin = arl_env::web::origin_of(site).unwrap_or(site).to_string();
        let hostport = origin.split_once("://").map_or(origin.as_str(), |(_, h)| h).to_string();
        let launch = arl_env::web::cdp::LaunchOpts { chromium, allow: vec![hostport], timeout };
        let http = arl_http::client::builder().timeout(timeout).build().context("HTTP client")?;
        let tool = Arc::new(tools::web::WebTool::new(&origin, launch, cfg.web_max_chars, http));
        for definition in arl_env::web::definitions() {
            let name = definition.pointer("/function/name").and_then(Value::as_str).unwrap_or("").to_string();
            reg.add(Tool { name, definition, imp: ToolImpl::Web(tool.clone()) })?;
        }
    }
    let specs: Vec<Value> = match &cfg.tool_spec {
        Some(p) => {
            let text = std::fs::read_to_string(p).with_context(|| format!("cannot read `{}`", p.display()))?;
            serde_json::from_str(&text)
                .with_context(|| format!("`{}`: expected a JSON list of tool definitions", p.display()))?
        }
        None => vec![],
    };
    for spec in &cfg.external {
        let (name, cmd) =
            spec.split_once('=').ok_or_else(|| cli::usage(format!("`--tool {spec}`: expected NAME=COMMAND")))?;
        let definition = specs
            .iter()
            .find(|d| d.pointer("/function/name").and_then(Value::as_str) == Some(name))
            .cloned()
            .unwrap_or_else(|| {
                tools::function_def(
                    name,
                    &format!("External tool `{name}`"),
                    json!({"type": "object", "additionalProperties": true}),
                )
            });
        reg.add(Tool {
            name: name.to_string(),
            definition,
            imp: ToolImpl::External(tools::external::External { command: cmd.to_string(), timeout }),
        })?;
    }
    Ok(reg)
}

/// How tools reach the model with `template` (`--tool-call-parser`,
/// `--tool-header`, `--tool-header-mode`; see [`arl_chat::tool_header`]).
fn tool_prompt(
    cfg: &Config,
    template: Option<&arl_chat::template::ChatTemplate>,
) -> Result<Option<arl_chat::tool_header::ToolPrompt>> {
    let Some(template) = template else { return Ok(None) };
    let source = match &cfg.tool_header {
        Some(p) => Some(
            std::fs::read_to_string(p)
                .map_err(|e| cli::usage(format!("`--tool-header {}`: cannot read it: {e}", p.display())))?,
        ),
        None => None,
    };
    let prompt =
        arl_chat::tool_header::ToolPrompt::new(template, cfg.tool_call_parser, source.as_deref(), cfg.tool_header_mode)
            .map_err(|e| match &cfg.tool_header {
                Some(p) => cli::data(format!("`--tool-header {}`: {e:#}", p.display())),
                None => e,
            })?;
    Ok(Some(prompt))
}

/// The model's chat template with `--chat-template-kwargs` in every rendering.
fn chat_template(cfg: &Config, tok: &Tokenizer) -> Result<arl_chat::template::ChatTemplate> {
    Ok(arl_chat::template::ChatTemplate::from_tokenizer(tok)?.with_kwargs(cfg.chat_template_kwargs.clone()))
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

/// Runs the rollout of `cfg` to the end: every group written, or an error
/// (completed groups stay in the `.partial` file).
pub fn run(cfg: Config) -> Result<ExitCode> {
    // A steady loop of small requests over a heap that grows with the dataset.
    arl_core::alloc::keep_freed_memory();
    arl_core::alloc::no_transparent_huge_pages();
    // First, so that the trace's clock covers the whole run.
    let tracer = match &cfg.trace {
        Some(p) => Some(Arc::new(trace::Tracer::create(
            p,
            &trace::RunInfo {
                concurrency: cfg.concurrency,
                endpoints: cfg.router.as_slice().iter().chain(&cfg.endpoints).cloned().collect::<Vec<_>>().as_slice(),
                n_samples_per_prompt: cfg.n_samples_per_prompt,
            },
        )?)),
        None => None,
    };
    let res = run_with(cfg, tracer.clone());
    match tracer {
        Some(t) => {
            let finished = t.finish(res.is_ok());
            let code = res?;
            finished?;
            Ok(code)
        }
        None => res,
    }
}

fn run_with(cfg: Config, tracer: Option<Arc<trace::Tracer>>) -> Result<ExitCode> {
    let out_path = cfg.output.path.clone();
    let tokenizer = Arc::new(Tokenizer::load(&cfg.tokenizer)?);
    let template = if cfg.no_chat_template { None } else { Some(chat_template(&cfg, &tokenizer)?) };
    let prompt_for = |template: &Option<arl_chat::template::ChatTemplate>| tool_prompt(&cfg, template.as_ref());
    let eos_text = tokenizer.config_str("eos_token");
    let eos_ids = arl_chat::tokenizer::eos_ids(&tokenizer.dir, &tokenizer)?;
    let env_config: Option<Value> = match &cfg.env_config {
        Some(p) => {
            let text = std::fs::read_to_string(p).with_context(|| format!("cannot read `{}`", p.display()))?;
            Some(serde_json::from_str(&text).with_context(|| format!("`{}`: invalid JSON", p.display()))?)
        }
        None => None,
    };
    let endpoints = cfg.endpoints.clone();
    let client = Client::new(
        ClientConfig {
            endpoints,
            router: cfg.router.clone(),
            api_key: cfg.api_key.clone(),
            timeout: cfg.request_timeout,
            max_retries: cfg.max_retries,
            backoff: cfg.retry_backoff,
            lora: cfg.lora.clone(),
        },
        cfg.concurrency,
    )?;
    let mut sampling = serde_json::Map::new();
    sampling.insert("temperature".into(), json!(cfg.temperature));
    sampling.insert("top_p".into(), json!(cfg.top_p));
    sampling.insert("top_k".into(), json!(cfg.top_k));
    if !cfg.stop.is_empty() {
        sampling.insert("stop".into(), json!(cfg.stop));
    }
    if !cfg.stop_token_ids.is_empty() {
        sampling.insert("stop_token_ids".into(), json!(cfg.stop_token_ids));
    }
    // As slime sends them: keep the stop token in the output, and decode
    // special tokens without inserted spaces.
    sampling.insert("no_stop_trim".into(), json!(true));
    sampling.insert("skip_special_tokens".into(), json!(false));
    sampling.insert("spaces_between_special_tokens".into(), json!(false));

    let rt =
        tokio::runtime::Builder::new_current_thread().enable_all().build().context("starting the async runtime")?;
    // Built outside the runtime: the sandbox's SandboxFusion client is a
    // blocking reqwest client, which must not be created or dropped in async code.
    let mut registry = build_registry(&cfg)?;
    let mut default_tools: Vec<String> = registry.tools.iter().map(|t| t.name.clone()).collect();
    for cmd in &cfg.mcp {
        let timeout = cfg.tool_timeout;
        let (c, list) = rt.block_on(async {
            let c = Arc::new(tools::mcp::McpClient::start(cmd, timeout).await?);
            let list = c.list_tools().await.with_context(|| format!("MCP server `{cmd}`: tools/list"))?;
            anyhow::Ok((c, list))
        })?;
        for (name, def) in list {
            default_tools.push(name.clone());
            registry.add(Tool { name, definition: def, imp: ToolImpl::Mcp(c.clone()) })?;
        }
    }
    let base_env = env::Env {
        name: "default".into(),
        definitions: env::definitions(&default_tools, &registry)?,
        tools: default_tools,
        max_turns: cfg.max_turns,
        max_response_len: cfg.max_response_len,
        max_tool_output: cfg.max_tool_output,
    };
    let envs = env::Envs::new(base_env, env_config.as_ref(), &registry)?;
    let shared = Arc::new(Shared {
        client,
        tokenizer: tokenizer.clone(),
        tool_prompt: prompt_for(&template)?,
        parser: cfg.tool_call_parser,
        template,
        tools: registry,
        eos_ids,
        eos_text,
        max_new_tokens: cfg.max_new_tokens,
        sampling: client::Sampling::new(sampling),
        tracer: tracer.clone(),
    });
    let opponent = match &cfg.opponent_endpoint {
        Some(url) => {
            let client = Client::new(
                ClientConfig {
                    endpoints: vec![url.clone()],
                    router: None,
                    api_key: cfg.api_key.clone(),
                    timeout: cfg.request_timeout,
                    max_retries: cfg.max_retries,
                    backoff: cfg.retry_backoff,
                    // The opponent's server plays its own model.
                    lora: None,
                },
                cfg.concurrency,
            )?;
            let template = if cfg.no_chat_template { None } else { Some(chat_template(&cfg, &tokenizer)?) };
            Some(Arc::new(Shared {
                client,
                tokenizer: tokenizer.clone(),
                tool_prompt: prompt_for(&template)?,
                parser: cfg.tool_call_parser,
                template,
                tools: tools::Registry::default(),
                eos_ids: shared.eos_ids.clone(),
                eos_text: shared.eos_text.clone(),
                max_new_tokens: shared.max_new_tokens,
                sampling: shared.sampling.clone(),
                tracer: tracer.clone(),
            }))
        }
        None => None,
    };
    let res = rt.block_on(drive(cfg, shared.clone(), opponent.clone(), envs, out_path));
    // Tasks still holding `shared` (aborted groups) go with the runtime; the
    // last reference is dropped here, outside async code.
    drop(rt);
    drop(shared);
    drop(opponent);
    res
}

/// Reads and normalises every prompt (the walk needs the whole dataset);
/// rows that are not prompts go to the rejects. Returns the prompts (boxed:
/// growing a vector of whole records copied them all, twice over) and where
/// each came from.
#[allow(clippy::vec_box)]
fn read_prompts(cfg: &Config, input: &mut Input) -> Result<(Vec<Box<Record>>, Vec<arl_core::io::Pos>)> {
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
fn plan_jobs(
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
                Ok(_) => jobs.push(Job { idx, epoch, prompt_ids: Arc::from([]), env: envs.default.clone() }),
                Err(why) => reject(input, why)?,
            }
            continue;
        }
        let env = match envs.pick(prompt) {
            Ok(e) => e,
            Err(why) => {
                reject(input, why)?;
                continue;
            }
        };
        match prompt_ids(prompt, shared, &env, cfg.system.as_deref()) {
            // One exact-size allocation: every prompt's ids are held for the whole run.
            Ok(ids) => jobs.push(Job { idx, epoch, prompt_ids: Arc::from(ids), env }),
            Err(why) => reject(input, why)?,
        }
    }
    Ok(jobs)
}

/// What the written groups add up to, for the progress line and the summary.
#[derive(Default)]
struct Tally {
    tool_calls: u64,
    tool_errors: u64,
    statuses: HashMap<&'static str, u64>,
    reward_sum: f64,
    reward_n: u64,
}

impl Tally {
    /// Counts a group's records, scoring them first with `--rm` (a record
    /// that cannot be scored, e.g. without a label, keeps no reward;
    /// arl-reward downstream would reject it with the reason).
    fn add(&mut self, recs: &mut [Record], spec: Option<&arl_reward::Spec>) {
        for r in recs.iter_mut() {
            if let Some(Ok(s)) = spec.map(|spec| arl_reward::score(spec, r)) {
                r.reward = Some(s.reward);
                r.reward_detail = Some(s.detail);
                self.reward_sum += s.reward as f64;
                self.reward_n += 1;
            }
            self.tool_calls += r.tool_calls.unwrap_or(0) as u64;
            self.tool_errors += r.meta("tool_errors").and_then(Value::as_u64).unwrap_or(0);
            *self.statuses.entry(r.status.map_or("none", |s| s.as_str())).or_default() += 1;
        }
    }

    fn mean_reward(&self) -> Option<f64> {
        (self.reward_n > 0).then(|| self.reward_sum / self.reward_n as f64)
    }
}

async fn drive(
    cfg: Config,
    shared: Arc<Shared>,
    opponent: Option<Arc<Shared>>,
    envs: env::Envs,
    out_path: Option<std::path::PathBuf>,
) -> Result<ExitCode> {
    let n = cfg.n_samples_per_prompt;
    let mut input = Input::open(&cfg.input)?;
    let (prompts, positions) = read_prompts(&cfg, &mut input)?;
    let mut out = output::Output::open(
        &cfg.output,
        out_path.as_deref(),
        cfg.resume,
        if cfg.arena { 2 * n } else { n },
        cfg.arena,
    )?;
    let resumed = out.done.len() as u64;
    let jobs = plan_jobs(&cfg, &prompts, &positions, &out.done, &envs, &shared, &mut input)?;
    drop(positions);

    let target = cfg.target_groups;
    let total = match target {
        Some(t) => t.min(resumed + jobs.len() as u64),
        None => resumed + jobs.len() as u64,
    };
    let pb = cli::progress(cfg.input.quiet, Some(total), "groups");
    pb.set_position(resumed);
    let started = Instant::now();
    if let Some(t) = &shared.tracer {
        t.ready(jobs.len(), jobs.len() as u64 * n as u64);
    }

    // Enough active groups to keep `--concurrency` requests busy while some
    // episodes wait on tools; requests themselves are capped in the client.
    let per_group = if cfg.arena { 2 * n as usize } else { n as usize };
    let active = (2 * cfg.concurrency).div_ceil(per_group).max(1);
    let arena = cfg.arena.then(|| {
        Arc::new(crate::arena::Arena {
            retries: cfg.illegal_retries,
            max_response_len: cfg.max_response_len,
            opponent: cfg.opponent_endpoint.clone().unwrap_or_else(|| "self".into()),
        })
    });
    let group_slots = Arc::new(tokio::sync::Semaphore::new(active));
    let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel::<Result<Vec<Record>, GenError>>();
    let mut pending = jobs.into_iter();
    let mut next_job = pending.next();
    let mut running = 0usize;
    let mut written = resumed;
    let mut failure: Option<anyhow::Error> = None;
    let mut stopped_early = false;
    let mut tally = Tally::default();
    let spec = cfg.rm.as_deref().map(|name| {
        arl_reward::Spec::new(match name {
            "math" => arl_reward::Rm::Math(Default::default()),
            "exact" => arl_reward::Rm::Exact,
            "game" => arl_reward::Rm::Game(Default::default()),
            _ => arl_reward::Rm::F1,
        })
    });

    if target.is_some_and(|t| written >= t) {
        next_job = None;
    }
    while next_job.is_some() || running > 0 {
        tokio::select! {
            biased;
            Some(res) = rx.recv() => {
                running -= 1;
                match res {
                    Ok(mut recs) => {
                        tally.add(&mut recs, spec.as_ref());
                        out.write_group(&recs)?;
                        written += 1;
                        pb.set_position(written);
                        let secs = started.elapsed().as_secs_f64().max(1e-3);
                        let tps = shared.client.stats.generated_tokens.load(Ordering::Relaxed) as f64 / secs;
                        pb.set_message(match tally.mean_reward() {
                            Some(m) => format!("groups, {tps:.0} tok/s, mean reward {m:.3}"),
                            None => format!("groups, {tps:.0} tok/s"),
                        });
                        if target.is_some_and(|t| written >= t) {
                            stopped_early = next_job.is_some() || running > 0;
                            break;
                        }
                    }
                    Err(GenError::Cancelled) => {}
                    Err(GenError::Fatal(e)) => {
                        failure = Some(e);
                        break;
                    }
                }
                // Groups completing together share one write; a lone one goes out at once.
                if rx.is_empty() {
                    out.flush()?;
                }
            }
            permit = group_slots.clone().acquire_owned(), if next_job.is_some() => {
                let Ok(permit) = permit else { break };
                let job = next_job.take().expect("guarded by the branch condition");
                next_job = pending.next();
                let job = Group { rec: selected(&prompts[job.idx], job.epoch), prompt_ids: job.prompt_ids, env: job.env };
                running += 1;
                let (shared, tx) = (shared.clone(), tx.clone());
                let (arena, opponent) = (arena.clone(), opponent.clone());
                tokio::spawn(async move {
                    let _permit = permit;
                    let res = match &arena {
                        Some(a) => run_games(a, &shared, opponent.as_deref(), job, n).await,
                        None => run_group(&shared, job, n).await,
                    };
                    let _ = tx.send(res);
                });
            }
        }
    }
    let aborted = if stopped_early || failure.is_some() { shared.client.abort_all().await } else { 0 };
    pb.finish_and_clear();

    if !cfg.input.quiet {
        let st = &shared.client.stats;
        let mut status_list: Vec<_> = tally.statuses.iter().map(|(k, v)| format!("{v} {k}")).collect();
        status_list.sort();
        eprintln!(
            "{TOOL}: {} groups written ({} resumed), trajectories: {}; {} requests, {} retries, {} aborted; {} tool calls ({} errors); {} tokens generated in {:.1}s{}",
            written,
            resumed,
            if status_list.is_empty() { "none".to_string() } else { status_list.join(", ") },
            st.requests.load(Ordering::Relaxed),
            st.retries.load(Ordering::Relaxed),
            aborted,
            tally.tool_calls,
            tally.tool_errors,
            st.generated_tokens.load(Ordering::Relaxed),
            started.elapsed().as_secs_f64(),
            match tally.mean_reward() {
                Some(m) => format!("; mean reward {m:.4} over {}", tally.reward_n),
                None => String::new(),
            }
        );
    }
    if let Some(e) = failure {
        out.abandon()?;
        let e = e.context("generation failed");
        return Err(if out_path.is_some() {
            cli::hint(e, "completed groups are kept in the `.partial` file; rerun with `--resume` to continue")
        } else {
            e
        });
    }
    out.finish()?;
    input.finish(TOOL, written.saturating_sub(resumed) * n as u64)?;
    Ok(ExitCode::SUCCESS)
}

/// Arena mode: the `n` games of one task, concurrently; their records (seat
/// `x` then `o`, game by game) are written as one unit.
async fn run_games(
    arena: &crate::arena::Arena,
    shared: &Shared,
    opponent: Option<&Shared>,
    job: Group,
    n: u32,
) -> Result<Vec<Record>, GenError> {
    let (game, opening) = crate::arena::task_game(&job.rec).map_err(|e| GenError::Fatal(anyhow::anyhow!(e)))?;
    let seats = [shared, opponent.unwrap_or(shared)];
    let prompt = job.rec.prompt.as_deref();
    let id = job.rec.prompt_id.as_deref().unwrap_or_default();
    let futs = (0..n).map(|i| {
        let trace = shared.tracer.as_deref().map(|t| t.sample(id, i));
        let opening = &opening;
        async move {
            let r = crate::arena::play(arena, seats, game, opening, prompt, trace).await;
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
            crate::arena::to_records(&job.rec, game, i as u32, r?, arena, [&seats[0].tokenizer, &seats[1].tokenizer])
                .into_iter();
        xs.extend(pair.next());
        os.extend(pair.next());
    }
    // Seat x's group, then seat o's.
    xs.extend(os);
    Ok(xs)
}

async fn run_group(shared: &Shared, job: Group, n: u32) -> Result<Vec<Record>, GenError> {
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
