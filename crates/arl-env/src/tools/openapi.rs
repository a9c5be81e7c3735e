//! OpenAPI tools: `--openapi SPEC_URL_OR_FILE` turns every operation of an
//! OpenAPI 3 spec into a tool. The tool's name is the `operationId`, its
//! arguments a JSON-schema object made of the path and query parameters and
//! the JSON request body's properties (a body that is not an object with
//! properties becomes one `body` argument); `$ref`s to `components` are
//! inlined. A call substitutes the path, adds the query, sends the rest as
//! the JSON body and returns the response body (an HTTP error status makes
//! it an error the model sees, `Error: HTTP 409: …`).
//!
//! Operations marked `x-arl-internal: true` are not tools. A spec with
//! `x-arl-episodes: {"create", "state", "header"}` (as `arl-env` serves) has
//! per-episode state: on an episode's first call rollout POSTs
//! `{"setup": metadata.api_setup}` to `create`, sends the returned
//! `episode_id` in `header` on every call, and records it in the
//! trajectory's `metadata.episode_id`, where `arl-reward --rm api` finds it.
use super::ToolOutput;
use anyhow::{anyhow, bail, Context, Result};
use serde_json::{json, Map, Value};

#[derive(Debug, Clone)]
pub struct Operation {
    pub id: String,
    pub method: String,
    pub path: String,
    pub path_params: Vec<String>,
    pub query_params: Vec<String>,
    /// Body properties, when the body is an object with properties.
    pub body_props: Vec<String>,
    /// The whole body is the `body` argument.
    pub body_whole: bool,
    pub required: Vec<String>,
    /// OpenAI tool definition.
    pub definition: Value,
}

#[derive(Debug, Clone)]
pub struct EpisodeApi {
    pub create: String,
    pub state: String,
    pub header: String,
}

#[derive(Debug, Clone)]
pub struct OpenApi {
    pub base: String,
    pub ops: Vec<Operation>,
    pub episodes: Option<EpisodeApi>,
}

/// One HTTP request of a tool call.
#[derive(Debug, Clone)]
pub struct Req {
    pub method: String,
    pub url: String,
    pub body: Option<Value>,
}

fn resolve(spec: &Value, v: &Value, depth: u32) -> Result<Value> {
    if depth > 16 {
        bail!("`$ref`s nest too deep (a cycle?)");
    }
    Ok(match v {
        Value::Object(m) => {
            if let Some(r) = m.get("$ref").and_then(Value::as_str) {
                let ptr = r
                    .strip_prefix('#')
                    .ok_or_else(|| anyhow!("`$ref` `{r}`: only local references (#/…) are supported"))?;
                let target = spec.pointer(ptr).ok_or_else(|| anyhow!("`$ref` `{r}` points nowhere"))?;
                return resolve(spec, target, depth + 1);
            }
            let mut out = Map::new();
            for (k, x) in m {
                out.insert(k.clone(), resolve(spec, x, depth + 1)?);
            }
            Value::Object(out)
        }
        Value::Array(a) => Value::Array(a.iter().map(|x| resolve(spec, x, depth + 1)).collect::<Result<_>>()?),
        x => x.clone(),
    })
}

/// Percent-encodes a path segment or query value (RFC 3986 unreserved kept).
pub fn encode(s: &str) -> String {
    let mut o = String::new();
    for b in s.bytes() {
        if b.is_ascii_alphanumeric() || b"-._~".contains(&b) {
            o.push(b as char);
        } else {
            o.push_str(&format!("%{b:02X}"));
        }
    }
    o
}

fn scalar_text(v: &Value) -> String {
    match v {
        Value::String(s) => s.clone(),
        x => x.to_string(),
    }
}

impl OpenApi {
    /// Reads a spec from an `http(s)://` URL (blocking) or a file.
    pub fn load(src: &str) -> Result<OpenApi> {
        let (spec, url): (Value, Option<&str>) = if src.starts_with("http://") || src.starts_with("https://") {
            let c = arl_http::client::blocking_builder().timeout(std::time::Duration::from_secs(30)).build()?;
            let r = c.get(src).send().with_context(|| format!("fetching the OpenAPI spec `{src}`"))?;
            if !r.status().is_success() {
                bail!("fetching the OpenAPI spec `{src}`: HTTP {}", r.status());
            }
            (r.json().with_context(|| format!("`{src}`: not JSON"))?, Some(src))
        } else {
            let text = std::fs::read_to_string(src).with_context(|| format!("cannot read `{src}`"))?;
            (serde_json::from_str(&text).with_context(|| format!("`{src}`: not a JSON OpenAPI spec"))?, None)
        };
        OpenApi::from_spec(&spec, url).with_context(|| format!("OpenAPI spec `{src}`"))
    }

    pub fn from_spec(spec: &Value, spec_url: Option<&str>) -> Result<OpenApi> {
        let version = spec.get("openapi").and_then(Value::as_str).unwrap_or("");
        if !version.starts_with('3') {
            bail!("`openapi`: expected a 3.x version, found `{version}`");
        }
        let server = spec.pointer("/servers/0/url").and_then(Value::as_str).unwrap_or("");
        let base = if server.starts_with("http://") || server.starts_with("https://") {
            server.trim_end_matches('/').to_string()
        } else {
            let u =
                spec_url.ok_or_else(|| anyhow!("`servers[0].url` must be an absolute URL when the spec is a file"))?;
            let origin_end =
                u.find("://").map(|i| i + 3).and_then(|i| u[i..].find('/').map(|j| i + j)).unwrap_or(u.len());
            format!("{}{}", &u[..origin_end], server.trim_end_matches('/'))
        };
        let paths = spec.get("paths").and_then(Value::as_object).ok_or_else(|| anyhow!("`paths`: missing"))?;
        let mut ops = Vec::new();
        for (path, item) in paths {
            let shared_params = item.get("parameters").cloned().unwrap_or(json!([]));
            for method in ["get", "post", "put", "patch", "delete"] {
                let Some(op) = item.get(method) else { continue };
                if op.get("x-arl-internal").and_then(Value::as_bool) == Some(true) {
                    continue;
                }
                let id = op
                    .get("operationId")
                    .and_then(Value::as_str)
                    .ok_or_else(|| anyhow!("{} {path}: no `operationId` (the tool's name)", method.to_uppercase()))?;
                if !id.chars().all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-')
                    || id.is_empty()
                    || id.len() > 64
                {
                    bail!("`operationId` `{id}`: a tool name needs 1–64 letters, digits, `_` or `-`");
                }
                let mut props = Map::new();
                let mut required = Vec::new();
                let (mut path_params, mut query_params, mut body_props, mut body_whole) =
                    (vec![], vec![], vec![], false);
                let params: Vec<Value> = shared_params
                    .as_array()
                    .into_iter()
                    .flatten()
                    .chain(op.get("parameters").and_then(Value::as_array).into_iter().flatten())
                    .cloned()
                    .collect();
                for p in params {
                    let p = resolve(spec, &p, 0)?;
                    let name = p
                        .get("name")
                        .and_then(Value::as_str)
                        .ok_or_else(|| anyhow!("`{id}`: a parameter without `name`"))?
                        .to_string();
                    let loc = p.get("in").and_then(Value::as_str).unwrap_or("");
                    match loc {
                        "path" => path_params.push(name.clone()),
                        "query" => query_params.push(name.clone()),
                        _ => continue, // headers and cookies are the client's business
                    }
                    let mut schema = p.get("schema").cloned().unwrap_or(json!({"type": "string"}));
                    if let (Some(d), Value::Object(s)) = (p.get("description"), &mut schema) {
                        s.entry("description").or_insert(d.clone());
                    }
                    if loc == "path" || p.get("required").and_then(Value::as_bool) == Some(true) {
                        required.push(name.clone());
                    }
                    props.insert(name, schema);
                }
                if let Some(body) = op.pointer("/requestBody/content/application~1json/schema") {
                    let body = resolve(spec, body, 0)?;
                    let body_required = op.pointer("/requestBody/required").and_then(Value::as_bool) == Some(true);
                    match body.get("properties").and_then(Value::as_object) {
                        Some(bp) if body.get("type").and_then(Value::as_str).unwrap_or("object") == "object" => {
                            for (k, v) in bp {
                                if props.contains_key(k) {
                                    bail!("`{id}`: body property `{k}` has the name of a parameter");
                                }
                                props.insert(k.clone(), v.clone());
                                body_props.push(k.clone());
                            }
                            for r in body
                                .get("required")
                                .and_then(Value::as_array)
                                .into_iter()
                                .flatten()
                                .filter_map(Value::as_str)
                            {
                                required.push(r.to_string());
                            }
                        }
                        _ => {
                            props.insert("body".into(), body.clone());
                            body_whole = true;
                            if body_required {
                                required.push("body".into());
                            }
                        }
                    }
                }
                let desc = op
                    .get("summary")
                    .or_else(|| op.get("description"))
                    .and_then(Value::as_str)
                    .unwrap_or("")
                    .to_string();
                let definition = super::function_def(
                    id,
                    &desc,
                    json!({"type": "object", "properties": props, "required": required}),
                );
                ops.push(Operation {
                    id: id.to_string(),
                    method: method.to_uppercase(),
                    path: path.clone(),
                    path_params,
                    query_params,
                    body_props,
                    body_whole,
                    required,
                    definition,
                });
            }
        }
        if ops.is_empty() {
            bail!("no operations");
        }
        let episodes = match spec.get("x-arl-episodes") {
            Some(e) => Some(EpisodeApi {
                create: e
                    .get("create")
                    .and_then(Value::as_str)
                    .ok_or_else(|| anyhow!("`x-arl-episodes.create` missing"))?
                    .to_string(),
                state: e
                    .get("state")
                    .and_then(Value::as_str)
                    .ok_or_else(|| anyhow!("`x-arl-episodes.state` missing"))?
                    .to_string(),
                header: e.get("header").and_then(Value::as_str).unwrap_or("X-Episode-Id").to_string(),
            }),
            None => None,
        };
        Ok(OpenApi { base, ops, episodes })
    }

    pub fn op(&self, name: &str) -> Option<&Operation> {
        self.ops.iter().find(|o| o.id == name)
    }

    /// The HTTP request of one call, or the error the model sees.
    pub fn request(&self, name: &str, args: &Value) -> Result<Req, String> {
        let op = self.op(name).ok_or_else(|| format!("unknown operation `{name}`"))?;
        let empty = Map::new();
        let args = match args {
            Value::Object(m) => m,
            Value::Null => &empty,
            _ => return Err("the arguments must be a JSON object".into()),
        };
        for k in args.keys() {
            let known = op.path_params.contains(k)
                || op.query_params.contains(k)
                || op.body_props.contains(k)
                || (op.body_whole && k == "body");
            if !known {
                let all: Vec<&String> = op.path_params.iter().chain(&op.query_params).chain(&op.body_props).collect();
                return Err(format!(
                    "`{name}` has no argument `{k}` (it takes: {})",
                    all.iter().map(|s| s.as_str()).collect::<Vec<_>>().join(", ")
                ));
            }
        }
        for r in &op.required {
            if args.get(r).is_none_or(Value::is_null) {
                return Err(format!("`{name}` needs the argument `{r}`"));
            }
        }
        let mut path = op.path.clone();
        for p in &op.path_params {
            let v = args.get(p).map(scalar_text).unwrap_or_default();
            if v.is_empty() {
                return Err(format!("`{p}` must not be empty"));
            }
            path = path.replace(&format!("{{{p}}}"), &encode(&v));
        }
        let query: Vec<String> = op
            .query_params
            .iter()
            .filter_map(|q| {
                args.get(q).filter(|v| !v.is_null()).map(|v| format!("{}={}", encode(q), encode(&scalar_text(v))))
            })
            .collect();
        let mut url = format!("{}{path}", self.base);
        if !query.is_empty() {
            url.push('?');
            url.push_str(&query.join("&"));
        }
        let body = if op.body_whole {
            args.get("body").cloned()
        } else if !op.body_props.is_empty() {
            let m: Map<String, Value> =
                op.body_props.iter().filter_map(|k| args.get(k).map(|v| (k.clone(), v.clone()))).collect();
            Some(Value::Object(m))
        } else {
            None
        };
        Ok(Req { method: op.method.clone(), url, body })
    }

    pub fn url(&self, path: &str) -> String {
        format!("{}{path}", self.base)
    }
}

/// What the model sees of an HTTP answer.
pub fn output(status: u16, text: &str) -> ToolOutput {
    if (200..300).contains(&status) {
        ToolOutput::ok(text.to_string())
    } else {
        ToolOutput::err(format!("Error: HTTP {status}: {text}"))
    }
}

/// The async client side, for `arl-rollout`.
pub struct OpenApiTool {
    pub api: OpenApi,
    pub http: reqwest::Client,
}

impl OpenApiTool {
    pub async fn call(&self, name: &str, args: &Value, state: &tokio::sync::Mutex<super::EpisodeState>) -> ToolOutput {
        let req = match self.api.request(name, args) {
            Ok(r) => r,
            Err(e) => return ToolOutput::err(format!("Error: {e}")),
        };
        let mut headers = Vec::new();
        if let Some(ep) = &self.api.episodes {
            let mut st = state.lock().await;
            if st.api_episode.is_none() {
                let setup = st.task.get("api_setup").cloned().unwrap_or(Value::Null);
                match self.start(ep, &setup).await {
                    Ok(id) => st.api_episode = Some(id),
                    Err(e) => return ToolOutput::err(format!("Error: cannot start the environment episode: {e}")),
                }
            }
            headers.push((ep.header.clone(), st.api_episode.clone().unwrap_or_default()));
        }
        let method = reqwest::Method::from_bytes(req.method.as_bytes()).unwrap_or(reqwest::Method::GET);
        let mut rb = self.http.request(method, &req.url);
        for (k, v) in headers {
            rb = rb.header(k, v);
        }
        if let Some(b) = &req.body {
            rb = rb.json(b);
        }
        match rb.send().await {
            Ok(r) => {
                let status = r.status().as_u16();
                match r.text().await {
                    Ok(t) => output(status, &t),
                    Err(e) => ToolOutput::err(format!("Error: reading the answer: {e}")),
                }
            }
            Err(e) => ToolOutput::err(format!("Error: the service is unreachable: {}", arl_http::client::why(&e))),
        }
    }

    async fn start(&self, ep: &EpisodeApi, setup: &Value) -> Result<String, String> {
        let r = self
            .http
            .post(self.api.url(&ep.create))
            .json(&json!({"setup": setup}))
            .send()
            .await
            .map_err(|e| arl_http::client::why(&e))?;
        let status = r.status();
        let v: Value = r.json().await.map_err(|e| e.to_string())?;
        if !status.is_success() {
            return Err(format!("HTTP {status}: {v}"));
        }
        v.get("episode_id").and_then(Value::as_str).map(str::to_string).ok_or_else(|| format!("no `episode_id` in {v}"))
    }
}

/// The blocking client side, for `arl-reward --rm api` (replays and state reads).
pub struct BlockingApi {
    pub api: OpenApi,
    pub http: reqwest::blocking::Client,
}

impl BlockingApi {
    pub fn new(api: OpenApi, timeout: std::time::Duration) -> Result<BlockingApi> {
        Ok(BlockingApi { api, http: arl_http::client::blocking_builder().timeout(timeout).build()? })
    }

    fn episodes(&self) -> Result<&EpisodeApi, String> {
        self.api.episodes.as_ref().ok_or_else(|| "the spec has no `x-arl-episodes` (per-episode state)".to_string())
    }

    pub fn start(&self, setup: &Value) -> Result<String, String> {
        let ep = self.episodes()?;
        let r = self
            .http
            .post(self.api.url(&ep.create))
            .json(&json!({"setup": setup}))
            .send()
            .map_err(|e| arl_http::client::why(&e))?;
        let status = r.status();
        let v: Value = r.json().map_err(|e| e.to_string())?;
        if !status.is_success() {
            return Err(format!("HTTP {status}: {v}"));
        }
        v.get("episode_id").and_then(Value::as_str).map(str::to_string).ok_or_else(|| format!("no `episode_id` in {v}"))
    }

    pub fn call(&self, episode: &str, name: &str, args: &Value) -> ToolOutput {
        let req = match self.api.request(name, args) {
            Ok(r) => r,
            Err(e) => return ToolOutput::err(format!("Error: {e}")),
        };
        let method = reqwest::Method::from_bytes(req.method.as_bytes()).unwrap_or(reqwest::Method::GET);
        let mut rb = self.http.request(method, &req.url);
        if let Ok(ep) = self.episodes() {
            rb = rb.header(ep.header.as_str(), episode);
        }
        if let Some(b) = &req.body {
            rb = rb.json(b);
        }
        match rb.send() {
            Ok(r) => {
                let status = r.status().as_u16();
                output(status, &r.text().unwrap_or_default())
            }
            Err(e) => ToolOutput::err(format!("Error: the service is unreachable: {}", arl_http::client::why(&e))),
        }
    }

    /// Forgets an episode (best effort).
    pub fn delete(&self, episode: &str) {
        if let Ok(ep) = self.episodes() {
            let url = self.api.url(&ep.state.replace("{episode_id}", &encode(episode)));
            let _ = self.http.delete(url).send();
        }
    }

    /// The episode's state; `Ok(None)` when the service does not know it.
    pub fn state(&self, episode: &str) -> Result<Option<Value>, String> {
        let ep = self.episodes()?;
        let url = self.api.url(&ep.state.replace("{episode_id}", &encode(episode)));
        let r = self
            .http
            .get(url)
            .send()
            .map_err(|e| format!("the service is unreachable: {}", arl_http::client::why(&e)))?;
        if r.status().as_u16() == 404 {
            return Ok(None);
        }
        if !r.status().is_success() {
            return Err(format!("reading the episode state: HTTP {}", r.status()));
        }
        r.json().map(Some).map_err(|e| e.to_string())
    }
}
