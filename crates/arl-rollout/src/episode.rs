//! One multi-turn episode, token-in/token-out (docs/DESIGN.md §4): the prompt ids
//! are rendered once; each turn's `output_ids` are appended exactly as the
//! server returned them (loss mask 1, its log-probs); tool calls in the turn
//! are run concurrently and the template's tool-response turn is appended as
//! tokens (loss mask 0, log-prob 0). Text is never re-tokenised.
use super::client::{Client, GenError};
use super::env::Env;
use super::trace::{SampleTrace, TurnTrace};
use arl_chat::template::ChatTemplate;
use arl_chat::tokenizer::Tokenizer;
use arl_chat::tool_header::ToolPrompt;
use arl_chat::toolcall::{Call, Parser};
use arl_core::record::Status;
use arl_env::tools::{EpisodeState, Registry, ToolOutput};
use serde_json::Value;
use std::sync::Arc;

/// Everything episodes share.
pub struct Shared {
    pub client: Client,
    pub tokenizer: Arc<Tokenizer>,
    pub template: Option<ChatTemplate>,
    /// How tools reach the model with `template` (its tool section or a tool
    /// header); none without a template.
    pub tool_prompt: Option<ToolPrompt>,
    /// How the model writes its tool calls (`--tool-call-parser`).
    pub parser: Parser,
    pub tools: Registry,
    /// The end-of-sequence ids (`<|im_end|>`; all of a `generation_config.json`
    /// list): a turn that ends on none of them stopped on a stop string.
    pub eos_ids: Vec<u32>,
    pub eos_text: Option<String>,
    /// Per-turn `max_new_tokens` cap (`--max-new-tokens`).
    pub max_new_tokens: Option<u32>,
    pub sampling: super::client::Sampling,
    /// `--trace`: where the timeline goes.
    pub tracer: Option<Arc<super::trace::Tracer>>,
}

#[derive(Debug, Default, Clone)]
pub struct Episode {
    pub tokens: Vec<u32>,
    pub prompt_len: usize,
    pub loss_mask: Vec<u8>,
    pub logprobs: Vec<f32>,
    pub status: Option<Status>,
    pub finish_reason: String,
    pub turns: u32,
    pub tool_calls: u32,
    /// Malformed or failed tool calls (the model saw an error message).
    pub tool_errors: u32,
    pub weight_versions: Vec<String>,
    /// The OpenAPI service's episode id, when a tool call started one.
    pub env_episode: Option<String>,
}

impl Shared {
    /// `messages` rendered with `template` and the generation prompt, the
    /// tools shown as [`Shared::tool_prompt`] shows them.
    pub fn render(
        &self,
        template: &ChatTemplate,
        messages: &[Value],
        tools: Option<&[Value]>,
    ) -> anyhow::Result<String> {
        match &self.tool_prompt {
            Some(p) => {
                let (messages, tools) = p.prepare(messages, tools)?;
                template.render(&messages, tools, true)
            }
            None => template.render(messages, tools, true),
        }
    }

    /// Runs one episode from `prompt_ids` on endpoint `ep`.
    /// `task` is the record's `metadata`, for tools with per-task state (`sql`).
    /// With `trace` (`--trace`), its requests, tool calls and end are noted.
    pub async fn run_episode(
        &self,
        ep: usize,
        prompt_ids: &[u32],
        env: &Env,
        task: &Value,
        trace: Option<SampleTrace<'_>>,
    ) -> Result<Episode, GenError> {
        let res = self.episode(ep, prompt_ids, env, task, trace).await;
        if let Some(t) = trace {
            match &res {
                Ok(e) => t.end(e.status.map_or("none", |s| s.as_str()), e.turns, e.tool_calls),
                Err(GenError::Cancelled) => t.end("cancelled", 0, 0),
                Err(GenError::Fatal(_)) => t.end("failed", 0, 0),
            }
        }
        res
    }

    /// Generates one turn of `e` on endpoint `ep` (at most `budget` tokens)
    /// and appends it as the server returned it: its ids with loss mask 1,
    /// their log-probs, its weight version and finish reason. Returns the
    /// finish reason (`stop`, `length`, `abort`).
    pub(crate) async fn generate_turn(
        &self,
        ep: usize,
        e: &mut Episode,
        budget: u32,
        turn: Option<TurnTrace<'_>>,
    ) -> Result<String, GenError> {
        let g = self.client.generate(ep, &e.tokens, &self.sampling, budget, turn).await?;
        self.client.stats.prompt_tokens.fetch_add(e.tokens.len() as u64, std::sync::atomic::Ordering::Relaxed);
        self.client.stats.generated_tokens.fetch_add(g.output_ids.len() as u64, std::sync::atomic::Ordering::Relaxed);
        e.tokens.extend_from_slice(&g.output_ids);
        e.loss_mask.extend(std::iter::repeat_n(1u8, g.output_ids.len()));
        e.logprobs.extend_from_slice(&g.logprobs);
        if let Some(v) = g.weight_version {
            e.weight_versions.push(v);
        }
        e.finish_reason = g.finish.clone();
        Ok(g.finish)
    }

    async fn episode(
        &self,
        ep: usize,
        prompt_ids: &[u32],
        env: &Env,
        task: &Value,
        trace: Option<SampleTrace<'_>>,
    ) -> Result<Episode, GenError> {
        let mut e = Episode { tokens: prompt_ids.to_vec(), prompt_len: prompt_ids.len(), ..Default::default() };
        let state = tokio::sync::Mutex::new(EpisodeState::for_task(task.clone()));
        let max_len = env.max_response_len as usize;
        let mut aborts_in_a_row = 0;
        loop {
            let used = e.tokens.len() - e.prompt_len;
            if used >= max_len {
                e.status = Some(Status::Truncated);
                break;
            }
            let mut budget = (max_len - used) as u32;
            if let Some(cap) = self.max_new_tokens {
                budget = budget.min(cap);
            }
            let turn_start = e.tokens.len();
            let turn = trace.map(|t| t.turn(e.turns + 1));
            let finish = self.generate_turn(ep, &mut e, budget, turn).await?;
            if finish == "abort" {
                if self.client.is_cancelled() {
                    return Err(GenError::Cancelled);
                }
                // The server aborted on its own (a weight update with
                // abort_all_requests): keep what was generated and continue
                // the same turn, as a partial rollout spanning two versions.
                aborts_in_a_row += 1;
                if aborts_in_a_row > 5 {
                    e.status = Some(Status::Aborted);
                    break;
                }
                continue;
            }
            aborts_in_a_row = 0;
            e.turns += 1;
            if e.tokens.len() - e.prompt_len >= max_len || finish == "length" {
                e.status = Some(Status::Truncated);
                break;
            }
            let text = self.tokenizer.decode(&e.tokens[turn_start..]);
            let calls = self.parser.parse(&text);
            if calls.is_empty() {
                e.status = Some(Status::Completed);
                break;
            }
            // A call to a schema the record offered (or to nothing the
            // environment runs, when it offered schemas) is the answer.
            let runs = |c: &Call| matches!(c, Call::Ok { name, .. } if env.tools.contains(name));
            if !env.schema_only.is_empty() && !calls.iter().all(runs) {
                e.tool_calls += calls.len() as u32;
                e.status = Some(Status::Completed);
                break;
            }
            if e.turns >= env.max_turns {
                e.status = Some(Status::Truncated);
                break;
            }
            e.tool_calls += calls.len() as u32;
            let turn = e.turns;
            let futs = calls.iter().map(|c| async {
                let start = trace.map(|t| t.tracer.now());
                let out = match c {
                    Call::Ok { name, arguments } => self.tools.call(name, arguments, &env.tools, &state).await,
                    Call::Malformed(why) => ToolOutput::err(format!("Error: {why}")),
                };
                if let (Some(t), Some(start)) = (trace, start) {
                    let name = match c {
                        Call::Ok { name, .. } => name.as_str(),
                        Call::Malformed(_) => "(malformed call)",
                    };
                    t.tool(turn, name, start, out.error);
                }
                out
            });
            let outputs = futures::future::join_all(futs).await;
            e.tool_errors += outputs.iter().filter(|o| o.error).count() as u32;
            let results: Vec<String> =
                outputs.into_iter().map(|o| arl_env::tools::truncate_middle(&o.text, env.max_tool_output)).collect();
            let template = match &self.template {
                Some(t) => t,
                None => {
                    e.status = Some(Status::Completed);
                    break;
                }
            };
            let mut turn_text = match template.tool_turn(Some(&env.definitions), &results) {
                Ok(t) => t,
                Err(err) => return Err(GenError::Fatal(err)),
            };
            // The turn stopped on a stop string, not the end-of-turn token:
            // close the turn the way the template would have.
            if let Some(txt) = &self.eos_text {
                if !e.tokens.last().is_some_and(|t| self.eos_ids.contains(t)) {
                    turn_text.insert_str(0, txt);
                }
            }
            let ids = self.tokenizer.encode(&turn_text).map_err(GenError::Fatal)?;
            let room = max_len - (e.tokens.len() - e.prompt_len);
            let take = ids.len().min(room);
            e.tokens.extend_from_slice(&ids[..take]);
            e.loss_mask.extend(std::iter::repeat_n(0u8, take));
            e.logprobs.extend(std::iter::repeat_n(0f32, take));
            if take < ids.len() {
                e.status = Some(Status::Truncated);
                break;
            }
        }
        {
            let st = state.lock().await;
            e.env_episode = st.api_episode.clone().or_else(|| st.web_episode.clone());
        }
        Ok(e)
    }
}
