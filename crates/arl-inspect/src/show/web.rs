//! The view of a web episode (`arl-rollout --web`) for `arl-inspect show`:
//! the browser actions the model took, each followed by the page it returned.
use arl_env_core::web::TOOLS;
use serde_json::Value;

/// A web episode for `arl-inspect show`: each browser action (`→ click({"id": 4})`)
/// followed by the page it returned, indented; the last words of the model
/// at the end. `None` when the response calls no browser tool.
pub fn render_episode(response: &str) -> Option<String> {
    let re = regex::Regex::new(r"(?s)<tool_call>\s*(.*?)\s*</tool_call>|<tool_response>\n?(.*?)\n?</tool_response>")
        .expect("static regex");
    let mut out = String::new();
    let mut actions = 0;
    let mut end = 0;
    for c in re.captures_iter(response) {
        end = c.get(0).map_or(end, |m| m.end());
        if let Some(call) = c.get(1) {
            let v: Value = serde_json::from_str(call.as_str()).unwrap_or(Value::Null);
            let name = v.get("name").and_then(Value::as_str).unwrap_or("?");
            let args = v.get("arguments").map(Value::to_string).unwrap_or_default();
            if TOOLS.contains(&name) {
                actions += 1;
            }
            out += &format!("→ {name}({args})\n");
        } else if let Some(obs) = c.get(2) {
            for l in obs.as_str().lines() {
                out += &format!("    {l}\n");
            }
        }
    }
    if actions == 0 {
        return None;
    }
    let rest: String = response[end..]
        .replace("<|im_end|>", "")
        .replace("<|im_start|>assistant", "")
        .replace("<|im_start|>user", "")
        .trim()
        .to_string();
    if !rest.is_empty() {
        out += &format!("final: {rest}\n");
    }
    Some(format!("{actions} browser actions\n{out}"))
}

#[cfg(test)]
mod tests {
    #[test]
    fn renders_episodes() {
        let r = "<tool_call>\n{\"name\": \"open\", \"arguments\": {\"url\": \"/\"}}\n</tool_call><|im_end|>\n<|im_start|>user\n<tool_response>\nTitle: Home\nURL: /\n</tool_response><|im_end|>\n<|im_start|>assistant\nDone.<|im_end|>";
        let s = super::render_episode(r).unwrap();
        assert_eq!(s, "1 browser actions\n→ open({\"url\":\"/\"})\n    Title: Home\n    URL: /\nfinal: Done.\n");
        assert!(super::render_episode("Answer: 4").is_none());
    }
}
