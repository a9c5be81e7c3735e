//! Weight sync: push a checkpoint to a fleet of SGLang-compatible servers
//! (`arl-serve` or SGLang itself) through `/update_weights_from_disk`, then
//! prove each one serves it (`/get_model_info` reports the new
//! `weight_version`, `/health_generate` answers). A trainer that believes a
//! server is on step N when it is not produces silently off-policy data, so
//! every server gets its own verdict and any failure makes the run fail.
//!
//! With a LoRA adapter name ([`SyncOptions::lora`]) the checkpoint is an
//! adapter directory, pushed through `/load_lora_adapter` instead (the
//! server replaces its adapter of that name) and verified by what the server
//! says it loaded and by one generation with that adapter ([`sync_one`]).
use anyhow::{bail, Context, Result};
use serde::Serialize;
use serde_json::{json, Value};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

/// What `arl-sync` does, independent of the command line.
#[derive(Debug, Clone)]
pub struct SyncOptions {
    /// Path sent to the servers as `model_path` (absolute).
    pub model_path: String,
    pub weight_version: String,
    pub abort_running: bool,
    /// Bound on the `/update_weights_from_disk` call (loading can be slow).
    pub update_timeout: Duration,
    /// Bound on each verification call and on connecting.
    pub verify_timeout: Duration,
    pub api_key: Option<String>,
    /// Push a LoRA adapter under this name instead of full weights.
    pub lora: Option<String>,
}

/// One server's outcome.
#[derive(Debug, Clone, Serialize)]
pub struct ServerResult {
    pub url: String,
    pub ok: bool,
    /// The step that failed (`update`, `verify`, `health`), or `done`.
    pub stage: String,
    pub message: String,
    /// The version the server reported after the update, when it answered.
    pub weight_version: Option<String>,
    pub seconds: f64,
}

/// Normalises an endpoint: adds `http://` when no scheme is given, drops a trailing `/`.
pub fn normalize_url(u: &str) -> String {
    let u = u.trim().trim_end_matches('/');
    if u.contains("://") {
        u.to_string()
    } else {
        format!("http://{u}")
    }
}

fn client(timeout: Duration, connect: Duration) -> Result<reqwest::blocking::Client> {
    arl_http::client::blocking_builder()
        .timeout(timeout)
        .connect_timeout(connect)
        .build()
        .context("building HTTP client")
}

fn with_key(rb: reqwest::blocking::RequestBuilder, key: &Option<String>) -> reqwest::blocking::RequestBuilder {
    match key {
        Some(k) => rb.bearer_auth(k),
        None => rb,
    }
}

/// Worker URLs behind an sgl-router: `GET /workers` (router ≥ 0.2.2,
/// `{"workers":[{"url":…}]}`), falling back to the legacy `GET /list_workers`
/// (`{"urls":[…]}`).
pub fn discover_workers(router: &str, api_key: &Option<String>, timeout: Duration) -> Result<Vec<String>> {
    let router = normalize_url(router);
    let c = client(timeout, timeout)?;
    let mut errors = Vec::new();
    match with_key(c.get(format!("{router}/workers")), api_key).send() {
        Ok(r) if r.status().is_success() => {
            let v: Value = r.json().context("`GET /workers`: invalid JSON")?;
            if let Some(ws) = v.get("workers").and_then(Value::as_array) {
                let urls: Vec<String> = ws
                    .iter()
                    .filter(|w| w.get("worker_type").and_then(Value::as_str).is_none_or(|t| t != "prefill"))
                    .filter_map(|w| w.get("url").and_then(Value::as_str).map(normalize_url))
                    .collect();
                return Ok(urls);
            }
            errors.push("`GET /workers` answered without a `workers` list".to_string());
        }
        Ok(r) => errors.push(format!("`GET /workers` answered HTTP {}", r.status().as_u16())),
        Err(e) => errors.push(format!("`GET /workers`: {e}")),
    }
    match with_key(c.get(format!("{router}/list_workers")), api_key).send() {
        Ok(r) if r.status().is_success() => {
            let v: Value = r.json().context("`GET /list_workers`: invalid JSON")?;
            let urls = v
                .get("urls")
                .and_then(Value::as_array)
                .context("`GET /list_workers` answered without a `urls` list")?;
            Ok(urls.iter().filter_map(Value::as_str).map(normalize_url).collect())
        }
        Ok(r) => {
            errors.push(format!("`GET /list_workers` answered HTTP {}", r.status().as_u16()));
            bail!("cannot list the workers of router `{router}`: {}", errors.join("; "))
        }
        Err(e) => {
            errors.push(format!("`GET /list_workers`: {e}"));
            bail!("cannot list the workers of router `{router}`: {}", errors.join("; "))
        }
    }
}

use arl_http::client::why;

/// One server's sync under way: its URL, its clock, the two clients (the
/// update's timeout and the verification's) and what every kind of sync
/// asks of a server.
struct Attempt<'a> {
    url: String,
    t0: Instant,
    opts: &'a SyncOptions,
    update: reqwest::blocking::Client,
    verify: reqwest::blocking::Client,
}

impl<'a> Attempt<'a> {
    /// `Err`: the failed result to report (a client could not be built).
    fn start(url: &str, opts: &'a SyncOptions) -> std::result::Result<Attempt<'a>, ServerResult> {
        let (t0, url) = (Instant::now(), normalize_url(url));
        let clients = client(opts.update_timeout, opts.verify_timeout)
            .and_then(|u| Ok((u, client(opts.verify_timeout, opts.verify_timeout)?)));
        match clients {
            Ok((update, verify)) => Ok(Attempt { url, t0, opts, update, verify }),
            Err(e) => Err(ServerResult {
                url,
                ok: false,
                stage: "update".into(),
                message: format!("{e:#}"),
                weight_version: None,
                seconds: t0.elapsed().as_secs_f64(),
            }),
        }
    }

    fn result(&self, ok: bool, stage: &str, message: String, version: Option<String>) -> ServerResult {
        ServerResult {
            url: self.url.clone(),
            ok,
            stage: stage.into(),
            message,
            weight_version: version,
            seconds: self.t0.elapsed().as_secs_f64(),
        }
    }

    fn fail(&self, stage: &str, message: String, version: Option<String>) -> ServerResult {
        self.result(false, stage, message, version)
    }

    /// `POST path` with the update's timeout: the status, the answer as JSON
    /// (null when it is not) and as text; `Err`: why no answer came.
    fn post(&self, path: &str, body: &Value) -> std::result::Result<(u16, Value, String), String> {
        let rb = self.update.post(format!("{}{path}", self.url)).json(body);
        let r = with_key(rb, &self.opts.api_key).send().map_err(|e| why(&e))?;
        let status = r.status().as_u16();
        let text = r.text().unwrap_or_default();
        Ok((status, serde_json::from_str(&text).unwrap_or(Value::Null), text))
    }

    /// `GET /get_model_info` with the verification's timeout; `Err`: the
    /// failed result (stage `verify`).
    fn model_info(&self) -> std::result::Result<Value, ServerResult> {
        match with_key(self.verify.get(format!("{}/get_model_info", self.url)), &self.opts.api_key).send() {
            Ok(r) if r.status().is_success() => Ok(r.json::<Value>().unwrap_or(Value::Null)),
            Ok(r) => Err(self.fail("verify", format!("`/get_model_info` answered HTTP {}", r.status().as_u16()), None)),
            Err(e) => Err(self.fail("verify", why(&e), None)),
        }
    }
}

/// Updates and verifies one server. With [`SyncOptions::lora`]: see [`sync_lora`].
pub fn sync_one(url: &str, opts: &SyncOptions) -> ServerResult {
    if let Some(name) = &opts.lora {
        return sync_lora(url, name, opts);
    }
    let s = match Attempt::start(url, opts) {
        Ok(s) => s,
        Err(failed) => return failed,
    };
    let body = json!({
        "model_path": opts.model_path,
        "weight_version": opts.weight_version,
        "abort_all_requests": opts.abort_running,
    });
    let (status, v, text) = match s.post("/update_weights_from_disk", &body) {
        Ok(a) => a,
        Err(e) => return s.fail("update", e, None),
    };
    if !(200..300).contains(&status) || v.get("success").and_then(Value::as_bool) != Some(true) {
        return s.fail("update", format!("HTTP {status}: {}", error_text(&v, &text)), None);
    }
    let info = match s.model_info() {
        Ok(i) => i,
        Err(failed) => return failed,
    };
    let version = info.get("weight_version").and_then(Value::as_str).map(str::to_string);
    if version.as_deref() != Some(opts.weight_version.as_str()) {
        let shown = version.clone().unwrap_or_else(|| "none".into());
        return s.fail(
            "verify",
            format!("server reports weight_version `{shown}`, expected `{}`", opts.weight_version),
            version,
        );
    }
    match with_key(s.verify.get(format!("{}/health_generate", s.url)), &opts.api_key).send() {
        Ok(r) if r.status().is_success() => {}
        Ok(r) => return s.fail("health", format!("`/health_generate` answered HTTP {}", r.status().as_u16()), version),
        Err(e) => return s.fail("health", why(&e), version),
    }
    s.result(true, "done", format!("serving weight_version `{}`", opts.weight_version), version)
}

/// The error text of an SGLang answer: `error_message` (LoRA endpoints),
/// `message` (weight updates), `error.message`, else the start of the body.
fn error_text(v: &Value, text: &str) -> String {
    ["/error_message", "/message", "/error/message"]
        .iter()
        .find_map(|p| v.pointer(p).and_then(Value::as_str).map(str::to_string))
        .unwrap_or_else(|| text.chars().take(300).collect())
}

/// Pushes the adapter directory `opts.model_path` as LoRA adapter `name`:
///
/// 1. `POST /load_lora_adapter` `{lora_name, lora_path, weight_version}`
///    (arl-serve replaces an adapter of that name in place; a server that
///    refuses a name it already has, as SGLang does, gets
///    `/unload_lora_adapter` and the load again);
/// 2. verifies the answer's `loaded_adapters` maps `name` to that path and,
///    where `/get_model_info` lists `lora_adapters` (arl-serve), that it
///    reports that path and `weight_version`;
/// 3. one greedy token through `/generate` with `lora_path: name`, which must
///    answer (and, on arl-serve, report the new `weight_version`).
pub fn sync_lora(url: &str, name: &str, opts: &SyncOptions) -> ServerResult {
    let s = match Attempt::start(url, opts) {
        Ok(s) => s,
        Err(failed) => return failed,
    };
    let load = json!({"lora_name": name, "lora_path": opts.model_path, "weight_version": opts.weight_version});
    let ok = |status: u16, v: &Value| status == 200 && v.get("success").and_then(Value::as_bool) == Some(true);
    let mut answer = match s.post("/load_lora_adapter", &load) {
        Ok(a) => a,
        Err(e) => return s.fail("update", e, None),
    };
    if !ok(answer.0, &answer.1) && error_text(&answer.1, &answer.2).contains("already") {
        // A server that does not replace adapters in place.
        if let Err(e) = s.post("/unload_lora_adapter", &json!({"lora_name": name})) {
            return s.fail("update", e, None);
        }
        answer = match s.post("/load_lora_adapter", &load) {
            Ok(a) => a,
            Err(e) => return s.fail("update", e, None),
        };
    }
    let (status, v, text) = answer;
    if !ok(status, &v) {
        return s.fail("update", format!("HTTP {status}: {}", error_text(&v, &text)), None);
    }
    let listed = v.pointer("/loaded_adapters").and_then(|a| a.get(name)).and_then(Value::as_str);
    if listed != Some(opts.model_path.as_str()) {
        let shown = listed.map_or_else(|| "nothing".to_string(), |p| format!("`{p}`"));
        return s.fail(
            "verify",
            format!("after the load the server lists {shown} as adapter `{name}`, expected `{}`", opts.model_path),
            None,
        );
    }
    let info = match s.model_info() {
        Ok(i) => i,
        Err(failed) => return failed,
    };
    // arl-serve lists its adapters with their versions; SGLang does not.
    let versioned = info.get("lora_adapters").is_some_and(Value::is_object);
    let mut version = None;
    if versioned {
        let entry = info.pointer("/lora_adapters").and_then(|a| a.get(name));
        let path = entry.and_then(|e| e.get("path")).and_then(Value::as_str);
        version = entry.and_then(|e| e.get("weight_version")).and_then(Value::as_str).map(str::to_string);
        if path != Some(opts.model_path.as_str()) || version.as_deref() != Some(opts.weight_version.as_str()) {
            return s.fail(
                "verify",
                format!(
                    "`/get_model_info` reports adapter `{name}` as {}, expected path `{}` and weight_version `{}`",
                    entry.map_or_else(|| "missing".to_string(), Value::to_string),
                    opts.model_path,
                    opts.weight_version
                ),
                version,
            );
        }
    }
    let probe = json!({"input_ids": [0], "lora_path": name,
                       "sampling_params": {"max_new_tokens": 1, "temperature": 0}});
    match with_key(s.verify.post(format!("{}/generate", s.url)).json(&probe), &opts.api_key).send() {
        Ok(r) if r.status().is_success() => {
            let v: Value = r.json().unwrap_or(Value::Null);
            let answered = v.pointer("/meta_info/weight_version").and_then(Value::as_str);
            if versioned && answered != Some(opts.weight_version.as_str()) {
                return s.fail(
                    "health",
                    format!(
                        "a generation with adapter `{name}` reports weight_version `{}`, expected `{}`",
                        answered.unwrap_or("none"),
                        opts.weight_version
                    ),
                    version,
                );
            }
        }
        Ok(r) => {
            let status = r.status().as_u16();
            let text = r.text().unwrap_or_default();
            let v: Value = serde_json::from_str(&text).unwrap_or(Value::Null);
            return s.fail(
                "health",
                format!("a generation with adapter `{name}` answered HTTP {status}: {}", error_text(&v, &text)),
                version,
            );
        }
        Err(e) => return s.fail("health", why(&e), version),
    }
    let message = if versioned {
        format!("serving LoRA adapter `{name}` at weight_version `{}`", opts.weight_version)
    } else {
        format!("serving LoRA adapter `{name}` (the server reports no adapter versions)")
    };
    s.result(true, "done", message, version)
}

/// Checks an adapter directory before any server is touched: PEFT's
/// `adapter_config.json` (a LoRA one) and `adapter_model.safetensors`.
pub fn check_adapter(dir: &Path) -> Result<()> {
    let cfg = dir.join("adapter_config.json");
    let text = std::fs::read_to_string(&cfg)
        .with_context(|| format!("`{}`: cannot read it (is `{}` a LoRA adapter?)", cfg.display(), dir.display()))?;
    let v: Value = serde_json::from_str(&text).with_context(|| format!("`{}`: not JSON", cfg.display()))?;
    match v.get("peft_type").and_then(Value::as_str) {
        Some("LORA") => {}
        other => bail!("`{}`: `peft_type` is `{}`, expected `LORA`", cfg.display(), other.unwrap_or("missing")),
    }
    let w = dir.join("adapter_model.safetensors");
    match std::fs::metadata(&w) {
        Ok(m) if m.is_file() && m.len() > 0 => Ok(()),
        Ok(_) => bail!("`{}` is empty", w.display()),
        Err(e) => bail!("`{}`: {e}", w.display()),
    }
}

/// Syncs every server in parallel (one thread each); results in input order.
pub fn sync_all(urls: &[String], opts: &SyncOptions) -> Vec<ServerResult> {
    std::thread::scope(|s| {
        let handles: Vec<_> = urls.iter().map(|u| s.spawn(move || sync_one(u, opts))).collect();
        handles
            .into_iter()
            .zip(urls)
            .map(|(h, u)| {
                h.join().unwrap_or_else(|_| ServerResult {
                    url: normalize_url(u),
                    ok: false,
                    stage: "update".into(),
                    message: "internal error: worker thread panicked".into(),
                    weight_version: None,
                    seconds: 0.0,
                })
            })
            .collect()
    })
}

/// Absolute form of the checkpoint path, the way servers on the same machine need it.
pub fn absolute(dir: &Path) -> PathBuf {
    dir.canonicalize().unwrap_or_else(|_| dir.to_path_buf())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn urls() {
        assert_eq!(normalize_url("127.0.0.1:30000/"), "http://127.0.0.1:30000");
        assert_eq!(normalize_url("https://h:1"), "https://h:1");
    }
}
