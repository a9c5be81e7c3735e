//! Model output text through both tool-call parsers: the rollout's
//! (`rollout::episode::parse_tool_calls`) and the server's
//! (`serve::chat::parse_tool_calls`, with and without a tool-name filter).
#![no_main]
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let text = String::from_utf8_lossy(data);
    let calls = arl::rollout::episode::parse_tool_calls(&text);
    // Never more calls than opening tags.
    assert!(calls.len() <= text.matches("<tool_call>").count());

    let (normal, calls) = arl::serve::chat::parse_tool_calls(&text, &[]);
    assert!(normal.len() <= text.len());
    for c in &calls {
        // Arguments come back as JSON text or the string the model gave.
        let _ = serde_json::from_str::<serde_json::Value>(&c.arguments);
    }
    let names = vec!["calculator".to_string(), "python".to_string()];
    let (_, filtered) = arl::serve::chat::parse_tool_calls(&text, &names);
    assert!(filtered.len() <= calls.len());
    assert!(filtered.iter().all(|c| names.contains(&c.name)));
});
