//! `arl-inspect show`: one record as text for a terminal, a section per
//! record field in the order they are shown; arena games and tournaments
//! (`arena`) and web episodes (`web`) have views of their own.
use arl_chat::tokenizer::Tokenizer;
use arl_core::record::Record;

mod arena;
mod web;

struct Style {
    on: bool,
}

impl Style {
    fn wrap(&self, code: &str, s: &str) -> String {
        if self.on {
            format!("\x1b[{code}m{s}\x1b[0m")
        } else {
            s.to_string()
        }
    }
    fn head(&self, s: &str) -> String {
        self.wrap("1", &format!("── {s} "))
    }
    /// A section's heading line.
    fn section(&self, s: &mut String, title: &str) {
        *s += &self.head(title);
        *s += "\n";
    }
}

/// Contiguous runs of equal mask values: (start, end, trained).
pub fn mask_spans(mask: &[u8]) -> Vec<(usize, usize, bool)> {
    let mut out = Vec::new();
    let mut start = 0;
    for i in 1..=mask.len() {
        if i == mask.len() || mask[i] != mask[start] {
            if i > start {
                out.push((start, i, mask[start] != 0));
            }
            start = i;
        }
    }
    out
}

/// Renders one record as text for a terminal.
pub fn render(pos: &arl_core::io::Pos, r: &Record, tok: Option<&Tokenizer>, per_token: bool, color: bool) -> String {
    let st = Style { on: color };
    let mut s = String::new();
    summary(&mut s, &st, pos, r);
    if let Some(g) = r.metadata.as_ref().and_then(arena::game_section) {
        st.section(&mut s, "arena game");
        s += &g;
    }
    if let Some(t) = r.reward_detail.as_ref().and_then(arena::tournament_section) {
        st.section(&mut s, "arena tournament");
        s += &t;
    }
    prompt(&mut s, &st, r);
    messages(&mut s, &st, r);
    response(&mut s, &st, r, tok, per_token);
    if let Some(ep) = r.response.as_deref().and_then(web::render_episode) {
        st.section(&mut s, "web episode");
        s += &ep;
    }
    if let Some(d) = &r.reward_detail {
        st.section(&mut s, "reward_detail");
        s += &serde_json::to_string_pretty(d).unwrap_or_default();
        s += "\n";
    }
    other_fields(&mut s, &st, r);
    s
}

/// Where the record is, its ids, status, reward and the other short fields.
fn summary(s: &mut String, st: &Style, pos: &arl_core::io::Pos, r: &Record) {
    st.section(s, &format!("record at {pos}"));
    let opt = |v: Option<String>| v.unwrap_or_else(|| "-".into());
    *s += &format!(
        "prompt_id {}  sample {}  data_source {}\n",
        opt(r.prompt_id.clone()),
        opt(r.sample_index.map(|x| x.to_string())),
        opt(r.data_source.clone())
    );
    *s += &format!(
        "status {}  finish {}  turns {}  tool_calls {}  reward {}\n",
        opt(r.status.map(|x| x.to_string())),
        opt(r.finish_reason.clone()),
        opt(r.turns.map(|x| x.to_string())),
        opt(r.tool_calls.map(|x| x.to_string())),
        opt(r.reward.map(|x| format!("{x}")))
    );
    if let Some(w) = &r.weight_versions {
        *s += &format!("weight_versions {}\n", w.join(","));
    }
    if let Some(m) = &r.metadata {
        *s += &format!("metadata {}\n", serde_json::Value::Object(m.clone()));
    }
    if let Some(l) = &r.label {
        *s += &format!("label {l}\n");
    }
}

/// A message's role and content (a string, else its JSON).
fn message_line(st: &Style, m: &serde_json::Value) -> String {
    let role = m.get("role").and_then(|x| x.as_str()).unwrap_or("?");
    let content = m.get("content").map(|c| c.as_str().map(str::to_string).unwrap_or(c.to_string())).unwrap_or_default();
    format!("{}: {content}\n", st.wrap("36", role))
}

/// The prompt: its messages, or its text.
fn prompt(s: &mut String, st: &Style, r: &Record) {
    let Some(p) = &r.prompt else { return };
    st.section(s, "prompt");
    match arl_core::dataset::prompt_messages(p) {
        Some(msgs) => {
            for m in msgs {
                *s += &message_line(st, &m);
            }
        }
        None => {
            *s += p;
            *s += "\n";
        }
    }
}

fn messages(s: &mut String, st: &Style, r: &Record) {
    let Some(msgs) = r.messages.as_ref().and_then(|m| m.as_array()) else { return };
    st.section(s, "messages");
    for m in msgs {
        *s += &message_line(st, m);
        if let Some(tc) = m.get("tool_calls") {
            *s += &format!("  tool_calls: {tc}\n");
        }
    }
}

/// The response: its tokens by loss-mask span (decoded with a tokenizer),
/// each token with `per_token`; else its text.
fn response(s: &mut String, st: &Style, r: &Record, tok: Option<&Tokenizer>, per_token: bool) {
    let (Some(ids), Some(mask)) = (r.response_tokens(), r.loss_mask.as_deref()) else {
        return response_text(s, st, r, "response");
    };
    if ids.len() != mask.len() {
        return response_text(s, st, r, "response");
    }
    let trained = mask.iter().filter(|&&m| m != 0).count();
    st.section(
        s,
        &format!("response: {} tokens, {trained} trained, {} tool/environment", ids.len(), ids.len() - trained),
    );
    for (a, b, on) in mask_spans(mask) {
        let label = if on { "trained" } else { "not trained (tool/environment)" };
        match tok {
            Some(t) => {
                let text = t.decode(&ids[a..b]);
                let body = if st.on {
                    st.wrap(if on { "32" } else { "2" }, &text)
                } else if on {
                    format!("[+{text}+]")
                } else {
                    format!("[-{text}-]")
                };
                *s += &body;
            }
            None => *s += &format!("  tokens [{a}, {b}) {label}\n"),
        }
    }
    match tok {
        Some(t) => {
            *s += "\n";
            if per_token {
                token_table(s, st, r, t, ids, mask);
            }
        }
        None => response_text(s, st, r, "response text"),
    }
}

/// The response's text under `title`, when there is one.
fn response_text(s: &mut String, st: &Style, r: &Record, title: &str) {
    if let Some(text) = &r.response {
        st.section(s, title);
        *s += text;
        *s += "\n";
    }
}

/// Every response token: its id, mask, log-prob, advantage and text.
fn token_table(s: &mut String, st: &Style, r: &Record, t: &Tokenizer, ids: &[u32], mask: &[u8]) {
    st.section(s, "tokens");
    *s += "      i       id mask    logprob  advantage  token\n";
    let cell = |v: Option<&Vec<f32>>, i: usize| {
        v.and_then(|v| v.get(i)).map(|x| format!("{x:10.4}")).unwrap_or(format!("{:>10}", "-"))
    };
    for (i, &id) in ids.iter().enumerate() {
        let (lp, adv) = (cell(r.rollout_log_probs.as_ref(), i), cell(r.advantages.as_ref(), i));
        let piece = format!("{:?}", t.decode(&[id]));
        let mark = if mask[i] != 0 { "+" } else { "-" };
        *s += &format!("{i:7} {id:8} {mark:>4} {lp} {adv}  {piece}\n");
    }
}

/// Fields arl does not know, each cut to about 200 bytes.
fn other_fields(s: &mut String, st: &Style, r: &Record) {
    if r.extra.is_empty() {
        return;
    }
    st.section(s, "other fields");
    for (k, v) in &r.extra {
        let mut t = v.to_string();
        if t.len() > 200 {
            let cut = (0..=200).rev().find(|&i| t.is_char_boundary(i)).unwrap_or(0);
            t.truncate(cut);
            t += "…";
        }
        *s += &format!("{k}: {t}\n");
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn spans() {
        assert_eq!(mask_spans(&[1, 1, 0, 0, 0, 1]), vec![(0, 2, true), (2, 5, false), (5, 6, true)]);
        assert!(mask_spans(&[]).is_empty());
    }
}
