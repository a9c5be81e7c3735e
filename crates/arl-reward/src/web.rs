//! The `web` reward: did the episode reach its goal on the web task site
//! (`arl-env`, [`arl_env::web::site`])? The label is the goal (`signup`,
//! `wishlist` and/or `orders`, [`arl_env::web::site::check_goal`]); the final
//! state is read from the site for the trajectory's `metadata.episode_id`
//! (recorded by `arl-rollout --web`). A record without one (a reference
//! solution, an offline response) is replayed: a fresh site episode starts
//! from `metadata.web_setup`, the response's browser tool calls run in a
//! headless Chromium tab (its own browser context; the browser starts on
//! the first replay), and the replay episode is deleted once read. 1 when
//! the goal is met, else 0 with the unmet part in `reward_detail.reason`.
use crate::score::{Score, ScoreError};
use arl_chat::toolcall::{Call, Parser};
use arl_core::record::Record;
use arl_env::web::cdp::{Browser, LaunchOpts};
use arl_env::web::site::{check_goal, State};
use arl_env::web::{Session, TOOLS};
use serde_json::{json, Value};
use std::sync::{Arc, Mutex};

pub struct WebOpts {
    /// The task site, `http://host:port`.
    pub site: String,
    pub http: reqwest::blocking::Client,
    /// How to start the browser for replays; `None`: no Chromium was found.
    pub launch: Option<LaunchOpts>,
    pub max_chars: usize,
    /// How the model writes tool calls (`--tool-call-parser`).
    pub parser: Parser,
    browser: Mutex<Option<Arc<Browser>>>,
}

impl Clone for WebOpts {
    fn clone(&self) -> WebOpts {
        WebOpts {
            site: self.site.clone(),
            http: self.http.clone(),
            launch: self.launch.clone(),
            max_chars: self.max_chars,
            parser: self.parser,
            browser: Mutex::new(self.browser.lock().unwrap_or_else(|p| p.into_inner()).clone()),
        }
    }
}

impl std::fmt::Debug for WebOpts {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "WebOpts({})", self.site)
    }
}

impl WebOpts {
    pub fn new(site: &str, launch: Option<LaunchOpts>, timeout: std::time::Duration) -> anyhow::Result<WebOpts> {
        Ok(WebOpts {
            site: site.trim_end_matches('/').to_string(),
            http: arl_http::client::blocking_builder().timeout(timeout).build()?,
            launch,
            max_chars: 4000,
            parser: Parser::default(),
            browser: Mutex::new(None),
        })
    }

    fn browser(&self) -> Result<Arc<Browser>, String> {
        let mut g = self.browser.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(b) = g.as_ref() {
            return Ok(b.clone());
        }
        let o = self.launch.as_ref().ok_or(
            "replaying needs a browser, and no Chromium was found (install `chromium` or pass `--chromium PATH`)",
        )?;
        let b = Arc::new(Browser::launch(o)?);
        *g = Some(b.clone());
        Ok(b)
    }

    fn start(&self, setup: &Value) -> Result<String, String> {
        let r = self
            .http
            .post(format!("{}/web/episodes", self.site))
            .json(&json!({"setup": setup}))
            .send()
            .map_err(|e| format!("the task site is unreachable: {}", arl_http::client::why(&e)))?;
        let status = r.status();
        let v: Value = r.json().map_err(|e| e.to_string())?;
        if !status.is_success() {
            return Err(format!("HTTP {status}: {v}"));
        }
        v.get("episode_id").and_then(Value::as_str).map(str::to_string).ok_or_else(|| format!("no `episode_id` in {v}"))
    }

    /// The episode's state; `Ok(None)` when the site does not know it.
    pub fn state(&self, episode: &str) -> Result<Option<Value>, String> {
        let r = self
            .http
            .get(format!("{}/web/episodes/{}", self.site, arl_env::tools::openapi::encode(episode)))
            .send()
            .map_err(|e| format!("the task site is unreachable: {}", arl_http::client::why(&e)))?;
        if r.status().as_u16() == 404 {
            return Ok(None);
        }
        if !r.status().is_success() {
            return Err(format!("reading the episode state: HTTP {}", r.status()));
        }
        r.json().map(Some).map_err(|e| e.to_string())
    }

    fn delete(&self, episode: &str) {
        let _ =
            self.http.delete(format!("{}/web/episodes/{}", self.site, arl_env::tools::openapi::encode(episode))).send();
    }

    /// Replays browser tool calls in a fresh episode: (episode id, calls, calls that failed).
    pub fn replay(&self, setup: &Value, calls: &[(String, Value)]) -> Result<(String, usize, usize), String> {
        let id = self.start(setup)?;
        let browser = self.browser()?;
        let page = browser.new_page()?;
        let s = Session::new(page, &self.site, &id, self.max_chars);
        let mut errors = 0;
        for (name, args) in calls {
            if s.act(name, args).error {
                errors += 1;
            }
        }
        Ok((id, calls.len(), errors))
    }
}

impl super::goal::GoalEnv for WebOpts {
    const PLACE: &'static str = "task site";

    fn replay(&self, r: &Record, response: &str) -> Result<(String, usize, usize), ScoreError> {
        let setup = r.meta("web_setup").ok_or_else(|| {
            ScoreError("field `metadata.web_setup`: missing; a web task carries the site's initial state".into())
        })?;
        let calls: Vec<(String, Value)> = self
            .parser
            .parse_transcript(response)
            .into_iter()
            .filter_map(|c| match c {
                Call::Ok { name, arguments } if TOOLS.contains(&name.as_str()) => Some((name, arguments)),
                _ => None,
            })
            .collect();
        WebOpts::replay(self, setup, &calls).map_err(|e| ScoreError(format!("replaying in the browser: {e}")))
    }

    fn state(&self, episode: &str) -> Result<Option<Value>, String> {
        WebOpts::state(self, episode)
    }

    fn delete(&self, episode: &str) {
        WebOpts::delete(self, episode)
    }

    fn check(&self, state: &Value, goal: &Value) -> Result<Option<String>, ScoreError> {
        let st = State::from_setup(state).map_err(|e| ScoreError(format!("the task site's state: {e}")))?;
        check_goal(&st, goal).map_err(|e| ScoreError(format!("field `label`: {e}")))
    }
}

pub fn score(o: &WebOpts, r: &Record) -> Result<Score, ScoreError> {
    super::goal::score(o, r)
}
