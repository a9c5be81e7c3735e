//! Running and answering `/generate`: the items sent to the scheduler, what
//! arrives for each, and SGLang's response shape (whole or streamed).

use super::{bad, error, parse_body, parse_generate, AppState, Item};
use crate::scheduler::{Cmd, Finish, InputLogprobs, Job, Params, TokenOut, Update};
use arl_chat::tokenizer::Tokenizer;
use axum::body::Bytes;
use axum::extract::rejection::BytesRejection;
use axum::extract::State;
use axum::http::StatusCode;
use axum::response::sse::{Event, Sse};
use axum::response::{IntoResponse, Response};
use axum::Json;
use serde_json::{json, Map, Value};
use std::convert::Infallible;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Instant;
use tokio::sync::mpsc;

/// What has arrived for one item so far.
pub struct ItemState {
    pub rid: String,
    pub prompt_tokens: usize,
    /// Prompt tokens served from the prefix cache.
    pub cached_tokens: usize,
    pub return_logprob: bool,
    pub top_n: usize,
    pub params: Params,
    pub tokens: Vec<TokenOut>,
    pub input: Option<InputLogprobs>,
    pub finish: Option<Finish>,
    pub weight_version: String,
}

impl ItemState {
    fn apply(&mut self, u: Update) {
        self.tokens.extend(u.tokens);
        self.cached_tokens = self.cached_tokens.max(u.cached);
        if u.input.is_some() {
            self.input = u.input;
        }
        if u.finish.is_some() {
            self.finish = u.finish;
        }
        self.weight_version = u.weight_version;
    }

    pub fn output_ids(&self) -> Vec<u32> {
        self.tokens.iter().map(|t| t.id).collect()
    }

    /// The completion text with SGLang's stop trimming (unless `no_stop_trim`).
    pub fn text(&self, tok: &Tokenizer) -> String {
        let ids = self.output_ids();
        let p = &self.params;
        let ids: &[u32] = match &self.finish {
            Some(Finish::StopToken(_)) if !p.no_stop_trim && !ids.is_empty() => &ids[..ids.len() - 1],
            _ => &ids,
        };
        let mut text = tok.inner.decode(ids, p.skip_special_tokens).unwrap_or_default();
        if let Some(Finish::StopStr(s)) = &self.finish {
            if !p.no_stop_trim {
                if let Some(pos) = text.find(s.as_str()) {
                    text.truncate(pos);
                }
            }
        }
        text
    }
}

/// Sends the items to the scheduler; aborts them if dropped before they finish
/// (a client that hangs up stops costing compute).
pub struct Running {
    st: Arc<AppState>,
    pub states: Vec<ItemState>,
    rx: mpsc::UnboundedReceiver<(usize, Update)>,
    done: usize,
    pub t0: Instant,
}

impl Drop for Running {
    fn drop(&mut self) {
        for s in &self.states {
            if s.finish.is_none() {
                let _ = self.st.tx.send(Cmd::Abort { rid: Some(s.rid.clone()), all: false });
            }
        }
    }
}

impl Running {
    /// `stream`: the caller reads every token as it comes; otherwise the
    /// scheduler keeps them and sends each item's tokens once, when it ends.
    pub fn start(st: &Arc<AppState>, items: Vec<Item>, stream: bool) -> Result<Running, Response> {
        let (tx, rx) = mpsc::unbounded_channel();
        let version = st.shared.version();
        let mut states = Vec::with_capacity(items.len());
        let mut jobs = Vec::with_capacity(items.len());
        for (index, it) in items.into_iter().enumerate() {
            states.push(ItemState {
                rid: it.rid.clone(),
                prompt_tokens: it.input_ids.len(),
                cached_tokens: 0,
                return_logprob: it.return_logprob,
                top_n: it.top_logprobs_num,
                params: it.params.clone(),
                tokens: Vec::new(),
                input: None,
                finish: None,
                weight_version: version.clone(),
            });
            jobs.push(Job { item: it, index, stream, tx: tx.clone(), arrived: Instant::now(), adapter: None });
        }
        let run = Running { st: st.clone(), states, rx, done: 0, t0: Instant::now() };
        for j in jobs {
            st.send(Cmd::Generate(j))?;
        }
        Ok(run)
    }

    /// Waits for the next update; returns the index it touched, or None when all finished.
    pub async fn next(&mut self) -> Option<usize> {
        if self.done == self.states.len() {
            return None;
        }
        let (i, u) = self.rx.recv().await?;
        let was = self.states[i].finish.is_some();
        self.states[i].apply(u);
        if !was && self.states[i].finish.is_some() {
            self.done += 1;
        }
        Some(i)
    }

    pub async fn finish(&mut self) {
        while self.next().await.is_some() {}
    }

    pub fn all_done(&self) -> bool {
        self.done == self.states.len()
    }
}

pub(super) fn lp_tuple(tok: &Tokenizer, lp: Option<f32>, id: u32, with_text: bool) -> Value {
    let text = if with_text { Value::String(tok.inner.decode(&[id], false).unwrap_or_default()) } else { Value::Null };
    json!([lp.map(|x| x as f64), id, text])
}

pub(super) fn top_list(tok: &Tokenizer, top: &[(u32, f32)], with_text: bool) -> Value {
    Value::Array(top.iter().map(|&(id, lp)| lp_tuple(tok, Some(lp), id, with_text)).collect())
}

/// One item in SGLang's response shape (`text`, `output_ids`, `meta_info`).
pub fn item_json(tok: &Tokenizer, s: &ItemState, with_text: bool, elapsed: Option<f64>) -> Value {
    let mut meta = Map::new();
    meta.insert("id".into(), json!(s.rid));
    meta.insert("finish_reason".into(), s.finish.as_ref().map_or(Value::Null, Finish::to_json));
    meta.insert("prompt_tokens".into(), json!(s.prompt_tokens));
    meta.insert("completion_tokens".into(), json!(s.tokens.len()));
    meta.insert("cached_tokens".into(), json!(s.cached_tokens));
    meta.insert("weight_version".into(), json!(s.weight_version));
    if s.return_logprob {
        let (ids, lps, tops) = match &s.input {
            Some(i) => (i.ids.clone(), i.logprobs.clone(), i.top.clone()),
            None => (Vec::new(), Vec::new(), Vec::new()),
        };
        meta.insert(
            "input_token_logprobs".into(),
            Value::Array(ids.iter().zip(&lps).map(|(&id, &lp)| lp_tuple(tok, lp, id, with_text)).collect()),
        );
        meta.insert(
            "output_token_logprobs".into(),
            Value::Array(s.tokens.iter().map(|t| lp_tuple(tok, Some(t.logprob), t.id, with_text)).collect()),
        );
        meta.insert("output_token_logprobs_length".into(), json!(s.tokens.len()));
        if s.top_n > 0 {
            meta.insert(
                "input_top_logprobs".into(),
                Value::Array(
                    tops.iter().map(|t| t.as_ref().map_or(Value::Null, |t| top_list(tok, t, with_text))).collect(),
                ),
            );
            meta.insert(
                "output_top_logprobs".into(),
                Value::Array(s.tokens.iter().map(|t| top_list(tok, &t.top, with_text)).collect()),
            );
        }
    }
    if let Some(e) = elapsed {
        meta.insert("e2e_latency".into(), json!(e));
    }
    json!({"text": s.text(tok), "output_ids": s.output_ids(), "meta_info": meta})
}

/// The HTTP status an aborted item maps to (SGLang: 400 / 5xx aborts become errors).
pub(super) fn abort_status(states: &[ItemState]) -> Option<(StatusCode, String)> {
    for s in states {
        if let Some(Finish::Abort { message, status_code: Some(code), .. }) = &s.finish {
            if *code == 400 || *code >= 500 {
                return Some((
                    StatusCode::from_u16(*code).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR),
                    message.clone(),
                ));
            }
        }
    }
    None
}

pub(super) async fn generate(State(st): State<Arc<AppState>>, body: Result<Bytes, BytesRejection>) -> Response {
    st.generate_calls.fetch_add(1, Ordering::Relaxed);
    let m = match parse_body(body) {
        Ok(m) => m,
        Err(r) => return r,
    };
    let req = match parse_generate(&st, &m) {
        Ok(r) => r,
        Err(e) => return bad(e),
    };
    let mut run = match Running::start(&st, req.items, req.stream) {
        Ok(r) => r,
        Err(r) => return r,
    };
    let with_text = req.return_text_in_logprobs;
    if !req.stream {
        run.finish().await;
        if let Some((code, msg)) = abort_status(&run.states) {
            return error(code, msg);
        }
        let e2e = run.t0.elapsed().as_secs_f64();
        let items: Vec<Value> = run.states.iter().map(|s| item_json(&st.tok, s, with_text, Some(e2e))).collect();
        let body = if req.batched { Value::Array(items) } else { items.into_iter().next().unwrap_or(Value::Null) };
        return Json(body).into_response();
    }
    let batched = req.batched;
    let stream = futures::stream::unfold((run, st, false), move |(mut run, st, ended)| async move {
        if ended {
            return None;
        }
        match run.next().await {
            Some(i) => {
                let s = &run.states[i];
                let fin = s.finish.is_some();
                let mut v = item_json(&st.tok, s, with_text, fin.then(|| run.t0.elapsed().as_secs_f64()));
                if batched {
                    v["index"] = json!(i);
                }
                let ev = Event::default().data(v.to_string());
                Some((Ok::<Event, Infallible>(ev), (run, st, false)))
            }
            None => Some((Ok(Event::default().data("[DONE]")), (run, st, true))),
        }
    });
    Sse::new(stream).into_response()
}
