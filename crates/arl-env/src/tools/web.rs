//! The browser tools (`--web URL`): `open`, `click`, `type`, `select`,
//! `scroll`, `back` ([`crate::web::Session::act`]). On an episode's first
//! call, rollout starts an episode on the task site (`POST
//! URL/web/episodes {"setup": metadata.web_setup}`), opens a tab in a fresh
//! browser context of the shared headless Chromium (started on the first
//! call of the run), and records the site's episode id in the trajectory's
//! `metadata.episode_id`, where `arl-reward --rm web` finds it. The context
//! is disposed when the episode ends.
use super::{EpisodeState, ToolOutput};
use crate::web::cdp::{Browser, LaunchOpts};
use crate::web::Session;
use serde_json::{json, Value};
use std::sync::Arc;

pub struct WebTool {
    /// The task site (`arl-env`), `http://host:port`.
    pub site: String,
    pub launch: LaunchOpts,
    pub max_chars: usize,
    pub http: reqwest::Client,
    pub browser: tokio::sync::OnceCell<Arc<Browser>>,
}

impl WebTool {
    pub fn new(site: &str, launch: LaunchOpts, max_chars: usize, http: reqwest::Client) -> WebTool {
        WebTool {
            site: site.trim_end_matches('/').to_string(),
            launch,
            max_chars,
            http,
            browser: tokio::sync::OnceCell::new(),
        }
    }

    async fn browser(&self) -> Result<Arc<Browser>, String> {
        self.browser
            .get_or_try_init(|| async {
                let o = self.launch.clone();
                match tokio::task::spawn_blocking(move || Browser::launch(&o)).await {
                    Ok(r) => r.map(Arc::new),
                    Err(e) => Err(e.to_string()),
                }
            })
            .await
            .cloned()
    }

    async fn start(&self, setup: &Value) -> Result<String, String> {
        let r = self
            .http
            .post(format!("{}/web/episodes", self.site))
            .json(&json!({"setup": setup}))
            .send()
            .await
            .map_err(|e| format!("the task site is unreachable: {}", arl_http::client::why(&e)))?;
        let status = r.status();
        let v: Value = r.json().await.map_err(|e| e.to_string())?;
        if !status.is_success() {
            return Err(format!("HTTP {status}: {v}"));
        }
        v.get("episode_id").and_then(Value::as_str).map(str::to_string).ok_or_else(|| format!("no `episode_id` in {v}"))
    }

    /// Runs one action. The episode's state stays locked until the action is
    /// done, so the calls of one turn run one after another, in order (the
    /// lock is fair).
    pub async fn call(&self, name: &str, args: &Value, state: &tokio::sync::Mutex<EpisodeState>) -> ToolOutput {
        let mut st = state.lock().await;
        let session = {
            if st.web.is_none() {
                let setup = st.task.get("web_setup").cloned().unwrap_or(json!({"products": []}));
                let id = match self.start(&setup).await {
                    Ok(id) => id,
                    Err(e) => return ToolOutput::err(format!("Error: cannot start the web episode: {e}")),
                };
                st.web_episode = Some(id.clone());
                let browser = match self.browser().await {
                    Ok(b) => b,
                    Err(e) => return ToolOutput::err(format!("Error: the browser is unavailable: {e}")),
                };
                let page = match tokio::task::spawn_blocking(move || browser.new_page()).await {
                    Ok(Ok(p)) => p,
                    Ok(Err(e)) => return ToolOutput::err(format!("Error: cannot open a browser tab: {e}")),
                    Err(e) => return ToolOutput::err(format!("Error: {e}")),
                };
                st.web = Some(Arc::new(Session::new(page, &self.site, &id, self.max_chars)));
            }
            st.web.clone().expect("set above")
        };
        let (name, args) = (name.to_string(), args.clone());
        match tokio::task::spawn_blocking(move || session.act(&name, &args)).await {
            Ok(o) => o,
            Err(e) => ToolOutput::err(format!("Error: {e}")),
        }
    }
}
