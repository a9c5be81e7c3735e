//! Where the final answer is: the last `\boxed{…}` / `\fbox{…}`, else the
//! last `Answer:` line, without a chat template's end marker.

pub fn boxed_all(s: &str) -> Vec<&str> {
    let mut out = Vec::new();
    let b = s.as_bytes();
    let mut i = 0;
    while let Some(off) = find_boxed(&s[i..]) {
        let (start, kw_len) = off;
        let mut j = i + start + kw_len;
        while j < b.len() && b[j] == b' ' {
            j += 1;
        }
        if j < b.len() && b[j] == b'{' {
            let mut depth = 0usize;
            let mut k = j;
            let mut end = None;
            while k < b.len() {
                match b[k] {
                    b'{' => depth += 1,
                    b'}' => {
                        depth -= 1;
                        if depth == 0 {
                            end = Some(k);
                            break;
                        }
                    }
                    b'\\' => k += 1,
                    _ => {}
                }
                k += 1;
            }
            match end {
                Some(e) => {
                    out.push(&s[j + 1..e]);
                    i = e + 1;
                }
                None => break,
            }
        } else if j > i + start + kw_len {
            // `\boxed 5`: up to the next space or `$`.
            let e = s[j..].find([' ', '$', '\n']).map_or(s.len(), |x| j + x);
            out.push(&s[j..e]);
            i = e;
        } else {
            i = j;
        }
    }
    out
}

fn find_boxed(s: &str) -> Option<(usize, usize)> {
    let a = s.find("\\boxed").map(|x| (x, 6));
    let b = s.find("\\fbox").map(|x| (x, 5));
    match (a, b) {
        (Some(x), Some(y)) => Some(if x.0 <= y.0 { x } else { y }),
        (x, y) => x.or(y),
    }
}

/// End-of-turn markers a decoded response may still carry (the rollout keeps
/// the stop token, as SGLang and slime do): ChatML / Llama 3 `<|…|>`, `</s>`,
/// Gemma's `<end_of_turn>` and `<eos>`. An answer line ends at the first.
const END_MARKERS: &[&str] = &["<|", "</s>", "<end_of_turn>", "<eos>"];

/// `s` without a trailing end-of-turn marker (and what follows it).
pub fn strip_end_marker(s: &str) -> &str {
    let t = s.trim_end();
    for m in ["<|im_end|>", "<|endoftext|>", "<|eot_id|>", "</s>", "<end_of_turn>", "<eos>"] {
        if let Some(x) = t.strip_suffix(m) {
            return x;
        }
    }
    s
}

/// The text after the last `Answer:` (any case, markdown bold allowed) on its
/// line, up to an end-of-turn marker.
pub fn answer_line(s: &str) -> Option<&str> {
    let lower = s.to_ascii_lowercase();
    let pos = lower.rfind("answer:").or_else(|| lower.rfind("answer is"))?;
    let kw = if lower[pos..].starts_with("answer:") { 7 } else { 9 };
    let rest = &s[pos + kw..];
    let mut line = rest.split('\n').next().unwrap_or("");
    if let Some(cut) = END_MARKERS.iter().filter_map(|m| line.find(m)).min() {
        line = &line[..cut];
    }
    let t = line.trim().trim_start_matches("**").trim_end_matches("**").trim();
    let t = t.trim_start_matches(':').trim();
    if t.is_empty() {
        None
    } else {
        Some(t)
    }
}
