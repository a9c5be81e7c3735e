//! The `api` reward: did the episode reach its goal in the shop service
//! (`arl-env`, [`crate::shop`])? The label is the goal (`{"placed": [{"sku",
//! "quantity"}…]}` and/or `{"stock": {SKU: N}}`); the final state is read
//! from the service for the trajectory's `metadata.episode_id` (recorded by
//! `arl-rollout --openapi`). A record without one (a demonstration, an
//! offline response) is replayed: a fresh episode starts from
//! `metadata.api_setup`, the response's tool calls run in order, and the
//! replay episode is deleted once read. 1 when
//! the goal is met, else 0 with the unmet part in `reward_detail.reason`.
use super::{Score, ScoreError};
use crate::record::Record;
use crate::rollout::episode::{parse_tool_calls, Call};
use crate::shop::{check_goal, Shop};
use crate::tools::openapi::BlockingApi;
use serde_json::{json, Value};
use std::sync::Arc;

#[derive(Clone)]
pub struct ApiOpts {
    pub client: Arc<BlockingApi>,
}

impl std::fmt::Debug for ApiOpts {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "ApiOpts({})", self.client.api.base)
    }
}

pub fn score(o: &ApiOpts, r: &Record) -> Result<Score, ScoreError> {
    let goal = super::need_label(r)?;
    let c = &o.client;
    let (episode, mode, calls) = match r.meta("episode_id") {
        Some(Value::String(id)) => (id.clone(), "recorded", None),
        Some(_) => return Err(ScoreError("field `metadata.episode_id`: expected a string".into())),
        None => {
            let resp = super::need_response(r)?;
            let setup = r.meta("api_setup").cloned().ok_or_else(|| ScoreError("field `metadata.api_setup`: missing; an api task carries the initial state".into()))?;
            let id = c.start(&setup).map_err(|e| ScoreError(format!("starting a replay episode: {e}")))?;
            let mut n = 0;
            let mut errors = 0;
            for call in parse_tool_calls(resp) {
                if let Call::Ok { name, arguments } = call {
                    n += 1;
                    if c.call(&id, &name, &arguments).error {
                        errors += 1;
                    }
                }
            }
            (id, "replayed", Some((n, errors)))
        }
    };
    let mut detail = json!({"episode_id": episode, "mode": mode});
    if let Some((n, e)) = calls {
        detail["calls"] = json!(n);
        detail["call_errors"] = json!(e);
    }
    let state = c.state(&episode);
    if mode == "replayed" {
        c.delete(&episode);
    }
    let state = match state.map_err(ScoreError)? {
        Some(s) => s,
        None => return Err(ScoreError(format!("field `metadata.episode_id`: the service does not know episode `{episode}` (restarted, or another service?)"))),
    };
    let shop = Shop::from_setup(&state).map_err(|e| ScoreError(format!("the service's state: {e}")))?;
    match check_goal(&shop, goal).map_err(|e| ScoreError(format!("field `label`: {e}")))? {
        None => {
            detail["reason"] = json!("goal met");
            detail["match"] = json!(true);
            Ok(Score { reward: 1.0, detail, explain: format!("goal met ({mode} episode)") })
        }
        Some(why) => {
            detail["reason"] = json!(why.clone());
            detail["match"] = json!(false);
            Ok(Score { reward: 0.0, detail, explain: format!("goal not met: {why}") })
        }
    }
}
