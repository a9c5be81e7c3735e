//! Per-episode state of `arl-env`'s services (the shop API of
//! [`crate::shop`] and the web task site of [`crate::web::server`]): a
//! map from random episode ids to states, bounded (starting one more than the
//! limit forgets the oldest), behind a mutex shared by the handlers, and the
//! HTTP answers both services give for it: `{"episode_id"}` on creation, the
//! state as JSON, `{"deleted"}`, and 404 `{"error": "no episode `ID`"}`.
use axum::body::Bytes;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::Json;
use serde::Serialize;
use serde_json::{json, Map, Value};
use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex, MutexGuard};

/// Episodes in creation order, at most `max` of them.
pub struct Episodes<T> {
    map: HashMap<String, (u64, T)>,
    /// Creation number → id, oldest first.
    order: BTreeMap<u64, String>,
    next: u64,
    max: usize,
    prefix: &'static str,
}

/// What the handlers share.
pub type Shared<T> = Arc<Mutex<Episodes<T>>>;

impl<T> Episodes<T> {
    /// An empty store whose ids start with `prefix` (`ep-`, `web-`); `max` is
    /// at least 1.
    pub fn shared(max: usize, prefix: &'static str) -> Shared<T> {
        Arc::new(Mutex::new(Episodes { map: HashMap::new(), order: BTreeMap::new(), next: 0, max: max.max(1), prefix }))
    }

    /// Stores a new episode, forgetting the oldest one when full; returns its id.
    pub fn insert(&mut self, state: T) -> String {
        while self.map.len() >= self.max {
            let Some((_, oldest)) = self.order.pop_first() else { break };
            self.map.remove(&oldest);
        }
        let id = new_id(self.prefix);
        let n = self.next;
        self.next += 1;
        self.order.insert(n, id.clone());
        self.map.insert(id.clone(), (n, state));
        id
    }

    pub fn get(&self, id: &str) -> Option<&T> {
        self.map.get(id).map(|(_, s)| s)
    }

    pub fn get_mut(&mut self, id: &str) -> Option<&mut T> {
        self.map.get_mut(id).map(|(_, s)| s)
    }

    pub fn remove(&mut self, id: &str) -> Option<T> {
        let (n, s) = self.map.remove(id)?;
        self.order.remove(&n);
        Some(s)
    }

    pub fn len(&self) -> usize {
        self.map.len()
    }

    pub fn is_empty(&self) -> bool {
        self.map.is_empty()
    }
}

/// The store, even if a handler panicked while holding it (the states stay
/// usable: every change to one is a single assignment or a whole handler's work).
pub fn lock<T>(st: &Shared<T>) -> MutexGuard<'_, Episodes<T>> {
    st.lock().unwrap_or_else(|p| p.into_inner())
}

/// A random id: not guessable from another episode's, so one episode's
/// tool calls cannot reach another's state.
fn new_id(prefix: &str) -> String {
    use std::sync::atomic::{AtomicU64, Ordering};
    static CTR: AtomicU64 = AtomicU64::new(0);
    let t =
        std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map(|d| d.as_nanos() as u64).unwrap_or(0);
    let c = CTR.fetch_add(1, Ordering::Relaxed);
    let a = arl_core::rng::mix(&[t, u64::from(std::process::id()), c]);
    let b = arl_core::rng::mix(&[a, c, 0x51ed_270b]);
    format!("{prefix}{a:016x}{b:016x}")
}

/// `{"error": msg}` with `status`: the services' error shape.
pub fn error(status: StatusCode, msg: impl Into<String>) -> Response {
    (status, Json(json!({"error": msg.into()}))).into_response()
}

pub fn not_found(id: &str) -> Response {
    error(StatusCode::NOT_FOUND, format!("no episode `{id}`"))
}

/// A request body as a JSON object; an empty (or all-whitespace) body is `{}`.
pub fn body_object(body: &Bytes) -> Result<Map<String, Value>, Response> {
    if body.iter().all(u8::is_ascii_whitespace) {
        return Ok(Map::new());
    }
    match serde_json::from_slice::<Value>(body) {
        Ok(Value::Object(m)) => Ok(m),
        Ok(_) => Err(error(StatusCode::BAD_REQUEST, "the body must be a JSON object")),
        Err(e) => Err(error(StatusCode::BAD_REQUEST, format!("invalid JSON body: {e}"))),
    }
}

/// `POST …/episodes {"setup": …}`: builds the state from the body's `setup`
/// (or `default_setup`) with `from_setup` (its error → 422) and answers
/// `{"episode_id"}`.
pub fn create<T>(
    st: &Shared<T>,
    body: &Bytes,
    default_setup: Value,
    from_setup: impl FnOnce(&Value) -> Result<T, String>,
) -> Response {
    let m = match body_object(body) {
        Ok(m) => m,
        Err(r) => return r,
    };
    let state = match from_setup(m.get("setup").unwrap_or(&default_setup)) {
        Ok(s) => s,
        Err(e) => return error(StatusCode::UNPROCESSABLE_ENTITY, e),
    };
    let id = lock(st).insert(state);
    Json(json!({"episode_id": id})).into_response()
}

/// `GET …/episodes/ID`: the state as JSON.
pub fn state<T: Serialize>(st: &Shared<T>, id: &str) -> Response {
    match lock(st).get(id) {
        Some(s) => Json(json!(s)).into_response(),
        None => not_found(id),
    }
}

/// `DELETE …/episodes/ID`: forgets it.
pub fn forget<T>(st: &Shared<T>, id: &str) -> Response {
    match lock(st).remove(id) {
        Some(_) => Json(json!({"deleted": id})).into_response(),
        None => not_found(id),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_oldest_episode_is_forgotten_beyond_the_limit() {
        let st: Shared<u32> = Episodes::shared(2, "t-");
        let mut g = lock(&st);
        let a = g.insert(1);
        let b = g.insert(2);
        assert!(a.starts_with("t-") && a != b);
        assert_eq!(g.remove(&b), Some(2));
        let c = g.insert(3);
        let d = g.insert(4); // full (a, c): a goes
        assert_eq!((g.get(&a), g.get(&c), g.get(&d), g.len()), (None, Some(&3), Some(&4), 2));
        *g.get_mut(&c).unwrap() = 30;
        let e = g.insert(5); // c is now the oldest
        assert_eq!((g.get(&c), g.get(&d), g.get(&e)), (None, Some(&4), Some(&5)));
    }
}
