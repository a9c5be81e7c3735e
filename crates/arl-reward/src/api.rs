//! The `api` reward: did the episode reach its goal in the shop service
//! (`arl-env`, [`arl_env::shop`])? The label is the goal (`{"placed": [{"sku",
//! "quantity"}…]}` and/or `{"stock": {SKU: N}}`); the final state is read
//! from the service for the trajectory's `metadata.episode_id` (recorded by
//! `arl-rollout --openapi`). A record without one (a demonstration, an
//! offline response) is replayed: a fresh episode starts from
//! `metadata.api_setup`, the response's tool calls run in order, and the
//! replay episode is deleted once read. 1 when
//! the goal is met, else 0 with the unmet part in `reward_detail.reason`.
use crate::score::{Score, ScoreError};
use arl_chat::toolcall::Call;
use arl_core::record::Record;
use arl_env::shop::{check_goal, Shop};
use arl_env::tools::openapi::BlockingApi;
use serde_json::Value;
use std::sync::Arc;

#[derive(Clone)]
pub struct ApiOpts {
    pub client: Arc<BlockingApi>,
    /// How the model writes tool calls (`--tool-call-parser`).
    pub parser: arl_chat::toolcall::Parser,
}

impl std::fmt::Debug for ApiOpts {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "ApiOpts({})", self.client.api.base)
    }
}

impl super::goal::GoalEnv for ApiOpts {
    const PLACE: &'static str = "service";

    fn replay(&self, r: &Record, response: &str) -> Result<(String, usize, usize), ScoreError> {
        let c = &self.client;
        let setup = r.meta("api_setup").ok_or_else(|| {
            ScoreError("field `metadata.api_setup`: missing; an api task carries the initial state".into())
        })?;
        let id = c.start(setup).map_err(|e| ScoreError(format!("starting a replay episode: {e}")))?;
        let (mut n, mut errors) = (0, 0);
        for call in self.parser.parse_transcript(response) {
            if let Call::Ok { name, arguments } = call {
                n += 1;
                if c.call(&id, &name, &arguments).error {
                    errors += 1;
                }
            }
        }
        Ok((id, n, errors))
    }

    fn state(&self, episode: &str) -> Result<Option<Value>, String> {
        self.client.state(episode)
    }

    fn delete(&self, episode: &str) {
        self.client.delete(episode)
    }

    fn check(&self, state: &Value, goal: &Value) -> Result<Option<String>, ScoreError> {
        let shop = Shop::from_setup(state).map_err(|e| ScoreError(format!("the service's state: {e}")))?;
        check_goal(&shop, goal).map_err(|e| ScoreError(format!("field `label`: {e}")))
    }
}

pub fn score(o: &ApiOpts, r: &Record) -> Result<Score, ScoreError> {
    super::goal::score(o, r)
}
