//! What a run is set up with, from its [`Config`]: the tool registry
//! (built-in tools, `--openapi`, `--web`, external commands, MCP servers),
//! the chat template and how tools are shown to the model, the sampling
//! parameters, the server clients, and the [`Shared`] state of the policy's
//! seat and of an `--opponent-endpoint`'s.
use crate::client::{self, Client, ClientConfig};
use crate::config::Config;
use crate::env;
use crate::episode::Shared;
use crate::trace::Tracer;
use anyhow::{Context, Result};
use arl_chat::tokenizer::Tokenizer;
use arl_core::cli;
use arl_env::tools::{self, Registry, Tool, ToolImpl};
use serde_json::{json, Value};
use std::sync::Arc;

/// What a run's loop runs with.
pub(crate) struct Setup {
    /// The single-threaded runtime the run's async code runs on.
    pub(crate) rt: tokio::runtime::Runtime,
    pub(crate) shared: Arc<Shared>,
    /// `--opponent-endpoint`: what serves the arena's seat `o`.
    pub(crate) opponent: Option<Arc<Shared>>,
    pub(crate) envs: env::Envs,
}

/// Loads the tokenizer and template, reads `--env-config`, starts the
/// clients, the runtime and the tools, in that order (the first error wins).
pub(crate) fn build(cfg: &Config, tracer: Option<Arc<Tracer>>) -> Result<Setup> {
    let tokenizer = Arc::new(Tokenizer::load(&cfg.tokenizer)?);
    let template = if cfg.no_chat_template { None } else { Some(chat_template(cfg, &tokenizer)?) };
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
    let sampling = sampling(cfg);

    let rt =
        tokio::runtime::Builder::new_current_thread().enable_all().build().context("starting the async runtime")?;
    // Built outside the runtime: the sandbox's SandboxFusion client is a
    // blocking reqwest client, which must not be created or dropped in async code.
    let mut registry = build_registry(cfg)?;
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
        schema_only: Vec::new(),
        max_turns: cfg.max_turns,
        max_response_len: cfg.max_response_len,
        max_tool_output: cfg.max_tool_output,
    };
    let envs = env::Envs::new(base_env, env_config.as_ref(), &registry)?;
    let shared = Arc::new(Shared {
        client,
        tokenizer: tokenizer.clone(),
        tool_prompt: tool_prompt(cfg, template.as_ref())?,
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
        Some(url) => Some(Arc::new(opponent(cfg, url, &shared, tracer)?)),
        None => None,
    };
    Ok(Setup { rt, shared, opponent, envs })
}

/// The sampling parameters every request sends (`--temperature`, `--top-p`,
/// `--top-k`, `--stop`, `--stop-token-ids`).
fn sampling(cfg: &Config) -> serde_json::Map<String, Value> {
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
    sampling
}

/// What serves an arena's seat `o` behind `--opponent-endpoint` `url`: the
/// policy's tokenizer, sampling and limits, no tools.
fn opponent(cfg: &Config, url: &str, shared: &Shared, tracer: Option<Arc<Tracer>>) -> Result<Shared> {
    let client = Client::new(
        ClientConfig {
            endpoints: vec![url.to_string()],
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
    let template = if cfg.no_chat_template { None } else { Some(chat_template(cfg, &shared.tokenizer)?) };
    Ok(Shared {
        client,
        tokenizer: shared.tokenizer.clone(),
        tool_prompt: tool_prompt(cfg, template.as_ref())?,
        parser: cfg.tool_call_parser,
        template,
        tools: tools::Registry::default(),
        eos_ids: shared.eos_ids.clone(),
        eos_text: shared.eos_text.clone(),
        max_new_tokens: shared.max_new_tokens,
        sampling: shared.sampling.clone(),
        tracer,
    })
}

/// The tool registry of `--tools`, `--openapi`, `--web` and `--tool`
/// (`--mcp` servers join it once the runtime runs).
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
