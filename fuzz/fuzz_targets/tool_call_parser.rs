//! Model output text through arl's one tool-call parser
//! (`arl_chat::toolcall`): every call it finds, and the split into the
//! content before the calls and the calls, as rollout, the rewards and
//! `arl-serve`'s chat endpoint use it.
#![no_main]
use arl_chat::toolcall::{parse_tool_calls, split_tool_calls, Call};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let text = String::from_utf8_lossy(data);
    let calls = parse_tool_calls(&text);
    // Never more calls than opening tags.
    assert!(calls.len() <= text.matches("<tool_call>").count());
    for c in &calls {
        if let Call::Ok { arguments, .. } = c {
            // Arguments are always a JSON object.
            assert!(arguments.is_object());
        }
    }
    let (content, split) = split_tool_calls(&text);
    assert!(content.len() <= text.len());
    // The split finds the same calls.
    assert_eq!(split, calls);
});
