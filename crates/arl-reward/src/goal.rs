//! Rewards decided by an environment's final state (`api`: the shop service,
//! `web`: the task site), one procedure for both: the state is read for the
//! trajectory's `metadata.episode_id` (recorded by the rollout); a record
//! without one (a demonstration, an offline response) is replayed in a fresh
//! episode started from the record's setup, whose state is read and then
//! deleted. 1 when the label's goal is met, else 0 with the unmet part in
//! `reward_detail.reason`; `reward_detail` also says which episode was read
//! and how (`mode`: recorded or replayed, with the replay's calls and failed
//! calls).
use crate::score::{need_label, need_response, Score, ScoreError};
use arl_core::record::Record;
use serde_json::{json, Value};

/// What an environment provides for [`score`].
pub(crate) trait GoalEnv {
    /// The environment in messages: "service", "task site".
    const PLACE: &'static str;
    /// Starts an episode from the record's setup and runs the response's
    /// tool calls in order: (episode id, calls, failed calls).
    fn replay(&self, r: &Record, response: &str) -> Result<(String, usize, usize), ScoreError>;
    /// The episode's state; `Ok(None)` when the environment does not know it.
    fn state(&self, episode: &str) -> Result<Option<Value>, String>;
    fn delete(&self, episode: &str);
    /// `None` when `state` meets `goal`, else what is unmet. Errors name the
    /// state or the `label` field.
    fn check(&self, state: &Value, goal: &Value) -> Result<Option<String>, ScoreError>;
}

pub(crate) fn score<E: GoalEnv>(env: &E, r: &Record) -> Result<Score, ScoreError> {
    let goal = need_label(r)?;
    let (episode, mode, calls) = match r.meta("episode_id") {
        Some(Value::String(id)) => (id.clone(), "recorded", None),
        Some(_) => return Err(ScoreError("field `metadata.episode_id`: expected a string".into())),
        None => {
            let (id, n, e) = env.replay(r, need_response(r)?)?;
            (id, "replayed", Some((n, e)))
        }
    };
    let mut detail = json!({"episode_id": episode, "mode": mode});
    if let Some((n, e)) = calls {
        detail["calls"] = json!(n);
        detail["call_errors"] = json!(e);
    }
    let state = env.state(&episode);
    if mode == "replayed" {
        env.delete(&episode);
    }
    let Some(state) = state.map_err(ScoreError)? else {
        let place = E::PLACE;
        return Err(ScoreError(format!(
            "field `metadata.episode_id`: the {place} does not know episode `{episode}` (restarted, or another {place}?)"
        )));
    };
    match env.check(&state, goal)? {
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
