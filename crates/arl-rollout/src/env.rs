//! Per-record environments: which tools an episode may call and its limits.
//! A record picks one by `metadata.env`, else by its `data_source` through
//! the `--env-config` mapping, else it gets the default environment (the
//! tools and limits given by flags). One batch can mix environments. Without
//! `--env-config`, `metadata.env` is only a label and the flags apply to all.
//!
//! `--env-config` file (JSON):
//! ```json
//! {"envs": {"calc": {"tools": ["calculator"], "max_turns": 4, "max_response_len": 1024, "max_tool_output": 4000},
//!           "plain": {"tools": []}},
//!  "data_source": {"arith": "calc", "gsm8k": "plain"},
//!  "default": "calc"}
//! ```
//! Keys an environment omits take the flags' values.
use anyhow::{anyhow, bail, Context, Result};
use arl_core::record::Record;
use arl_env::tools::Registry;
use serde_json::Value;
use std::collections::HashMap;
use std::sync::Arc;

#[derive(Debug, Clone)]
pub struct Env {
    pub name: String,
    /// Tool names this environment may call.
    pub tools: Vec<String>,
    /// Their OpenAI definitions, rendered into the system turn (then the
    /// record's own `tools`, when it has them).
    pub definitions: Vec<Value>,
    /// The record's `tools`: schemas offered but not run. A turn whose calls
    /// are not all to tools this environment runs ends the episode when
    /// there are any (the call is the answer, as BFCL scores it).
    pub schema_only: Vec<String>,
    pub max_turns: u32,
    pub max_response_len: u32,
    pub max_tool_output: usize,
}

pub struct Envs {
    pub default: Arc<Env>,
    by_name: HashMap<String, Arc<Env>>,
    by_source: HashMap<String, String>,
}

impl Envs {
    /// `base` is the environment the flags describe.
    pub fn new(base: Env, config: Option<&Value>, registry: &Registry) -> Result<Envs> {
        let mut by_name = HashMap::new();
        let mut by_source = HashMap::new();
        let mut default = Arc::new(base.clone());
        if let Some(cfg) = config {
            if let Some(envs) = cfg.get("envs") {
                let envs = envs.as_object().ok_or_else(|| anyhow!("`envs` must be an object"))?;
                for (name, spec) in envs {
                    let mut e = base.clone();
                    e.name = name.clone();
                    if let Some(t) = spec.get("tools") {
                        e.tools = t
                            .as_array()
                            .ok_or_else(|| anyhow!("env `{name}`: `tools` must be a list of names"))?
                            .iter()
                            .map(|x| {
                                x.as_str()
                                    .map(str::to_string)
                                    .ok_or_else(|| anyhow!("env `{name}`: tool names are strings"))
                            })
                            .collect::<Result<_>>()?;
                    }
                    let num = |k: &str| spec.get(k).and_then(Value::as_u64);
                    if let Some(v) = num("max_turns") {
                        e.max_turns = v as u32;
                    }
                    if let Some(v) = num("max_response_len") {
                        e.max_response_len = v as u32;
                    }
                    if let Some(v) = num("max_tool_output") {
                        e.max_tool_output = v as usize;
                    }
                    e.definitions = definitions(&e.tools, registry).with_context(|| format!("env `{name}`"))?;
                    by_name.insert(name.clone(), Arc::new(e));
                }
            }
            if let Some(m) = cfg.get("data_source").and_then(Value::as_object) {
                for (src, env) in m {
                    let env = env.as_str().ok_or_else(|| anyhow!("`data_source.{src}` must name an env"))?;
                    if !by_name.contains_key(env) {
                        bail!("`data_source.{src}` names unknown env `{env}`");
                    }
                    by_source.insert(src.clone(), env.to_string());
                }
            }
            if let Some(d) = cfg.get("default").and_then(Value::as_str) {
                default = by_name.get(d).cloned().ok_or_else(|| anyhow!("`default` names unknown env `{d}`"))?;
            }
        }
        Ok(Envs { default, by_name, by_source })
    }

    /// The environment of a record with its own `tools` (schemas offered
    /// after the environment's, never run): `env` itself when it has none.
    pub fn with_record_tools(env: Arc<Env>, rec: &Record) -> Result<Arc<Env>, String> {
        let Some(t) = &rec.tools else { return Ok(env) };
        let objs = arl_chat::tools::tool_objects(t).map_err(|e| format!("field `tools`: {e}"))?;
        if objs.is_empty() {
            return Ok(env);
        }
        let mut e = (*env).clone();
        for o in objs {
            let name = arl_chat::tools::tool_name(&o).unwrap_or_default().to_string();
            if e.tools.contains(&name) {
                return Err(format!("field `tools`: `{name}` is also a tool the environment runs; rename one"));
            }
            e.schema_only.push(name);
            e.definitions.push(o);
        }
        Ok(Arc::new(e))
    }

    /// The environment of a record. Without `--env-config`, every record gets
    /// the flags' environment (a `metadata.env` such as `arl-tasks` writes is
    /// then only a label); with one, an unknown `metadata.env` is an error.
    pub fn pick(&self, rec: &Record) -> Result<Arc<Env>, String> {
        if self.by_name.is_empty() {
            return Ok(self.default.clone());
        }
        if let Some(v) = rec.meta("env") {
            let name = v.as_str().ok_or("field `metadata.env`: expected a string")?;
            return self
                .by_name
                .get(name)
                .cloned()
                .ok_or_else(|| format!("field `metadata.env`: unknown environment `{name}` (see --env-config)"));
        }
        if let Some(src) = &rec.data_source {
            if let Some(env) = self.by_source.get(src) {
                return Ok(self.by_name[env].clone());
            }
        }
        Ok(self.default.clone())
    }
}

/// The definitions of the named tools, in the order given.
pub fn definitions(names: &[String], registry: &Registry) -> Result<Vec<Value>> {
    names
        .iter()
        .map(|n| registry.get(n).map(|t| t.definition.clone()).ok_or_else(|| anyhow!("unknown tool `{n}`")))
        .collect()
}
