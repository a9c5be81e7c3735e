//! The web environment: a headless Chromium driven over the DevTools
//! protocol ([`cdp`]), the browser actions the model calls as tools
//! (`open`, `click`, `type`, `select`, `scroll`, `back`; [`Session::act`]),
//! the text observation of a page ([`render.js`](render.js): title, URL,
//! visible text and numbered interactive elements, capped), and the local
//! task site that `arl-env` serves under `/web/` ([`site`]).
//!
//! An episode is a server-side state on the task site (`POST /web/episodes`)
//! and a browser context of its own; the pages of episode ID live under
//! `/web/e/ID/`, and `open` resolves relative URLs against that root.
pub mod cdp;
pub mod server;
pub mod site;

use crate::tool_output::ToolOutput;
use serde_json::{json, Value};

/// The names of the browser tools.
pub use arl_env_core::web::TOOLS;

const RENDER_JS: &str = include_str!("render.js");

/// OpenAI tool definitions of the browser actions.
pub fn definitions() -> Vec<Value> {
    use crate::tool_output::function_def as f;
    let id = json!({"type": "integer", "description": "The element's number [N] in the last observation"});
    vec![
        f("open", "Open a URL of the task site (a path such as `/` or `/search` is relative to the site's root) and return the page.", json!({"type": "object", "properties": {"url": {"type": "string", "description": "The URL or path"}}, "required": ["url"]})),
        f("click", "Click the element numbered [id] (a link, a button, a checkbox) and return the page.", json!({"type": "object", "properties": {"id": id}, "required": ["id"]})),
        f("type", "Replace the text of the input numbered [id] with `text` (press_enter: then press Enter) and return the page.", json!({"type": "object", "properties": {"id": id, "text": {"type": "string"}, "press_enter": {"type": "boolean", "description": "Press Enter afterwards (submits most forms)"}}, "required": ["id", "text"]})),
        f("select", "Choose the option `value` (its text or value) in the drop-down numbered [id] and return the page.", json!({"type": "object", "properties": {"id": id, "value": {"type": "string"}}, "required": ["id", "value"]})),
        f("scroll", "Scroll the page `down` or `up` by most of a screen and return the page.", json!({"type": "object", "properties": {"direction": {"type": "string", "enum": ["down", "up"]}}, "required": ["direction"]})),
        f("back", "Go back to the previous page and return it.", json!({"type": "object", "properties": {}})),
    ]
}

/// One episode's browser tab, at home on the task site.
pub struct Session {
    pub page: cdp::Page,
    /// `http://host:port` of the task site.
    pub origin: String,
    /// The episode's root URL, ending in `/`.
    pub base: String,
    /// Most characters of one observation.
    pub max_chars: usize,
}

fn int_arg(args: &Value, k: &str) -> Result<i64, String> {
    match args.get(k) {
        Some(Value::Number(n)) => n.as_i64().ok_or_else(|| format!("`{k}` must be an integer")),
        Some(Value::String(s)) => s
            .trim()
            .trim_start_matches('[')
            .trim_end_matches(']')
            .parse()
            .map_err(|_| format!("`{k}` must be an integer")),
        _ => Err(format!("missing the integer argument `{k}`")),
    }
}

fn str_arg<'a>(args: &'a Value, k: &str) -> Result<&'a str, String> {
    args.get(k).and_then(Value::as_str).ok_or_else(|| format!("missing the string argument `{k}`"))
}

/// The origin (`scheme://host:port`) of a URL.
pub fn origin_of(url: &str) -> Option<&str> {
    let rest = url.find("://").map(|i| i + 3)?;
    let end = url[rest..].find('/').map_or(url.len(), |j| rest + j);
    Some(&url[..end])
}

impl Session {
    pub fn new(page: cdp::Page, origin: &str, episode: &str, max_chars: usize) -> Session {
        let origin = origin.trim_end_matches('/').to_string();
        let base = format!("{origin}/web/e/{episode}/");
        Session { page, origin, base, max_chars }
    }

    /// The URL `open` goes to, or why it may not.
    pub fn resolve(&self, url: &str) -> Result<String, String> {
        let url = url.trim();
        let full = if url.contains("://") || url.starts_with("//") || url.contains(':') && !url.starts_with('/') {
            url.to_string()
        } else {
            format!("{}{}", self.base, url.trim_start_matches('/'))
        };
        if !full.starts_with(&self.base) && format!("{full}/") != self.base {
            return Err(format!(
                "only this task's site is reachable: URLs under {} (or paths such as `/search`)",
                self.base
            ));
        }
        if full.split(['/', '?', '#']).any(|s| s == ".." || s == "%2e%2e" || s == "%2E%2E") {
            return Err("`..` is not allowed in URLs".into());
        }
        Ok(full)
    }

    /// The page as the model sees it.
    pub fn observe(&self) -> Result<String, String> {
        let mut v = self.page.eval(RENDER_JS)?;
        // A navigation that began after `settle`'s grace (a slow, loaded
        // machine) leaves a document still loading, often empty: wait for it.
        for _ in 0..3 {
            if v.get("ready").and_then(Value::as_str).is_none_or(|r| r == "complete") {
                break;
            }
            self.page.settle();
            v = self.page.eval(RENDER_JS)?;
        }
        let title = v.get("title").and_then(Value::as_str).unwrap_or("");
        let url = v.get("url").and_then(Value::as_str).unwrap_or("");
        let shown = match url.strip_prefix(&self.base) {
            Some(rest) => format!("/{rest}"),
            None if format!("{url}/") == self.base => "/".to_string(),
            None => url.to_string(),
        };
        let mut s = format!("Title: {title}\nURL: {shown}\n");
        let (y, h, vh) = (
            v.get("scroll_y").and_then(Value::as_i64).unwrap_or(0),
            v.get("page_height").and_then(Value::as_i64).unwrap_or(0),
            v.get("viewport").and_then(Value::as_i64).unwrap_or(0),
        );
        if h > vh && vh > 0 {
            s += &format!(
                "Scroll: {y}–{} of {h} px{}\n",
                (y + vh).min(h),
                if y + vh < h { " (scroll down for more)" } else { "" }
            );
        }
        s += "----\n";
        let body: Vec<&str> = v
            .get("lines")
            .and_then(Value::as_array)
            .map(|a| a.iter().filter_map(Value::as_str).collect())
            .unwrap_or_default();
        let body = body.join("\n");
        let n = body.chars().count();
        if self.max_chars > 0 && n > self.max_chars {
            let cut: String = body.chars().take(self.max_chars).collect();
            s += &cut;
            s += &format!("\n[… {} more characters; scroll down for the rest]", n - self.max_chars);
        } else {
            s += &body;
        }
        Ok(s)
    }

    /// Opens the episode's root page.
    pub fn home(&self) -> Result<String, String> {
        self.page.navigate(&self.base)?;
        self.observe()
    }

    fn element(&self, id: i64, js_body: &str) -> Result<Value, String> {
        let expr = format!(
            "(() => {{ const el = document.querySelector('[data-arl-id=\"{id}\"]'); if (!el) return {{missing: true}}; {js_body} }})()"
        );
        let v = self.page.eval(&expr)?;
        if v.get("missing").and_then(Value::as_bool) == Some(true) {
            return Err(format!("there is no element [{id}] on this page"));
        }
        if let Some(e) = v.get("error").and_then(Value::as_str) {
            return Err(e.to_string());
        }
        Ok(v)
    }

    /// Runs one browser action; the result is the new observation, or an
    /// error the model sees (with the page as it is).
    pub fn act(&self, name: &str, args: &Value) -> ToolOutput {
        match self.act_inner(name, args) {
            Ok(()) => match self.observe() {
                Ok(o) => ToolOutput::ok(o),
                Err(e) => ToolOutput::err(format!("Error: reading the page: {e}")),
            },
            Err(e) => ToolOutput::err(format!("Error: {e}")),
        }
    }

    fn act_inner(&self, name: &str, args: &Value) -> Result<(), String> {
        match name {
            "open" => {
                let url = self.resolve(str_arg(args, "url")?)?;
                self.page.navigate(&url)
            }
            "click" => {
                let id = int_arg(args, "id")?;
                let v = self.element(
                    id,
                    "if (el.tagName === 'SELECT') return {error: 'element [' + el.getAttribute('data-arl-id') + '] is a drop-down: use `select`'}; \
                     if (el.disabled) return {error: 'element [' + el.getAttribute('data-arl-id') + '] is disabled'}; \
                     el.scrollIntoView({block: 'center', inline: 'center'}); const r = el.getBoundingClientRect(); \
                     const x = r.left + r.width / 2, y = r.top + r.height / 2; const at = document.elementFromPoint(x, y); \
                     return {x: x, y: y, hit: !!at && (at === el || el.contains(at) || (at.control === el))};",
                )?;
                let hit = v.get("hit").and_then(Value::as_bool).unwrap_or(false);
                if hit {
                    let x = v.get("x").and_then(Value::as_f64).unwrap_or(0.0);
                    let y = v.get("y").and_then(Value::as_f64).unwrap_or(0.0);
                    self.page.click_at(x, y)?;
                } else {
                    self.element(id, "el.click(); return {};")?;
                }
                self.page.settle();
                Ok(())
            }
            "type" => {
                let id = int_arg(args, "id")?;
                let text = str_arg(args, "text")?;
                let enter = args.get("press_enter").and_then(Value::as_bool).unwrap_or(false);
                self.element(
                    id,
                    "const ok = el.tagName === 'TEXTAREA' || el.isContentEditable || (el.tagName === 'INPUT' && !['checkbox','radio','submit','button','reset','image','file','hidden'].includes(el.type)); \
                     if (!ok) return {error: 'element [' + el.getAttribute('data-arl-id') + '] is not a text input'}; \
                     if (el.disabled || el.readOnly) return {error: 'element [' + el.getAttribute('data-arl-id') + '] is read-only'}; \
                     el.scrollIntoView({block: 'center'}); el.focus(); \
                     if (el.isContentEditable) { el.textContent = ''; } else { el.select && el.select(); el.value = ''; } \
                     el.dispatchEvent(new Event('input', {bubbles: true})); return {};",
                )?;
                self.page.insert_text(text)?;
                self.element(id, "el.dispatchEvent(new Event('change', {bubbles: true})); return {};")?;
                if enter {
                    self.page.press_enter()?;
                    self.page.settle();
                }
                Ok(())
            }
            "select" => {
                let id = int_arg(args, "id")?;
                let value = str_arg(args, "value")?;
                let js = format!(
                    "if (el.tagName !== 'SELECT') return {{error: 'element [' + el.getAttribute('data-arl-id') + '] is not a drop-down'}}; \
                     const want = {w}.trim().toLowerCase(); const opts = Array.from(el.options); \
                     let i = opts.findIndex(o => o.value.trim().toLowerCase() === want); \
                     if (i < 0) i = opts.findIndex(o => o.text.replace(/\\s+/g, ' ').trim().toLowerCase() === want); \
                     if (i < 0) return {{error: 'no option ' + JSON.stringify({w}) + '; the options are: ' + opts.map(o => JSON.stringify(o.text.trim())).join(', ')}}; \
                     el.selectedIndex = i; el.dispatchEvent(new Event('input', {{bubbles: true}})); el.dispatchEvent(new Event('change', {{bubbles: true}})); return {{}};",
                    w = serde_json::to_string(value).unwrap_or_default()
                );
                self.element(id, &js)?;
                self.page.settle();
                Ok(())
            }
            "scroll" => {
                let d = args.get("direction").and_then(Value::as_str).unwrap_or("down");
                let sign = match d {
                    "down" => 1,
                    "up" => -1,
                    _ => return Err(format!("`direction` must be `down` or `up`, not `{d}`")),
                };
                self.page.eval(&format!("window.scrollBy(0, {sign} * Math.round(window.innerHeight * 0.8)); 0"))?;
                Ok(())
            }
            "back" => {
                if self.page.back()? {
                    Ok(())
                } else {
                    Err("there is no previous page".into())
                }
            }
            other => Err(format!("unknown browser action `{other}` (known: {})", TOOLS.join(", "))),
        }
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn origins() {
        assert_eq!(super::origin_of("http://127.0.0.1:80/a/b"), Some("http://127.0.0.1:80"));
        assert_eq!(super::origin_of("http://h:1"), Some("http://h:1"));
        assert_eq!(super::origin_of("nope"), None);
    }
}
