//! Where the final answer is. The final-answer segment of a response is
//! what follows its thinking section (`<think>…</think>` and the like; a
//! thinking section never closed leaves no answer), without a chat
//! template's end marker. In it the answer is the last `\boxed{…}` /
//! `\fbox{…}` (with the boxes offered together with it: see
//! [`final_boxes`]), else the last `Answer:` line.

/// Tags that open and close a reasoning model's thinking section.
const THINKING: &[(&str, &str)] =
    &[("<think>", "</think>"), ("<thinking>", "</thinking>"), ("<reasoning>", "</reasoning>")];

/// The final-answer segment: the text after the last closed thinking
/// section, or the whole response when it has none; `None` when a thinking
/// section is opened and never closed (the model never answered).
pub fn after_thinking(s: &str) -> Option<&str> {
    let mut rest = s;
    let mut cut = 0;
    for (open, close) in THINKING {
        if let Some(p) = s.rfind(close) {
            cut = cut.max(p + close.len());
        }
        // An opening tag after the last closing one: still thinking.
        if let Some(o) = s.rfind(open) {
            if s.rfind(close).is_none_or(|c| c < o) {
                return None;
            }
        }
    }
    if cut > 0 {
        rest = &s[cut..];
    }
    Some(rest)
}

/// Words that offer boxes as alternatives (`\boxed{3} or \boxed{5}`).
const ALTERNATIVES: &[&str] = &["or", "alternatively", "otherwise", "possibly", "perhaps", "maybe", "either", "and/or"];

/// The final answer's boxes: the last box, with the boxes before it that are
/// offered together with it — joined by nothing but punctuation, `and`, or
/// a word of alternatives (`or`, `alternatively`, `maybe`, …). Any other
/// text between two boxes means the later one replaces the earlier (a model
/// correcting itself: "first \boxed{3}, but rechecking, \boxed{5}").
pub fn final_boxes(s: &str) -> Vec<&str> {
    // An empty box (`\boxed{}`: a model echoing "put the answer in
    // \boxed{}") is not an answer.
    let spans: Vec<_> = boxed_spans(s).into_iter().filter(|(inner, _, _)| !inner.trim().is_empty()).collect();
    let Some(&(_, last_start, _)) = spans.last() else { return Vec::new() };
    let mut first = spans.len() - 1;
    let mut start = last_start;
    while first > 0 {
        let (_, _, prev_end) = spans[first - 1];
        let between = s[prev_end..start].to_ascii_lowercase();
        let words: Vec<&str> =
            between.split(|c: char| !(c.is_alphanumeric() || c == '/')).filter(|w| !w.is_empty()).collect();
        let together = words.iter().all(|w| *w == "and" || ALTERNATIVES.contains(w))
            || words.iter().any(|w| ALTERNATIVES.contains(w)) && words.len() <= 3;
        if !together {
            break;
        }
        first -= 1;
        start = spans[first].1;
    }
    spans[first..].iter().map(|&(b, _, _)| b).collect()
}

/// The contents of every `\boxed{…}` / `\fbox{…}` (also `\boxed 5`), in order.
pub fn boxed_all(s: &str) -> Vec<&str> {
    boxed_spans(s).into_iter().map(|(inner, _, _)| inner).collect()
}

/// Every box: its content, where it starts (at its keyword) and where it ends.
fn boxed_spans(s: &str) -> Vec<(&str, usize, usize)> {
    let mut out = Vec::new();
    let b = s.as_bytes();
    let mut i = 0;
    while let Some(off) = find_boxed(&s[i..]) {
        let (start, kw_len) = off;
        let at = i + start;
        let mut j = at + kw_len;
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
                    out.push((&s[j + 1..e], at, e + 1));
                    i = e + 1;
                }
                None => break,
            }
        } else if j > at + kw_len {
            // `\boxed 5`: up to the next space or `$`.
            let e = s[j..].find([' ', '$', '\n']).map_or(s.len(), |x| j + x);
            out.push((&s[j..e], at, e));
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
    // `\( 5 \)`, `\[ 5 \]`, `$5$`, `$$5$$`: the answer inside the math delimiters.
    let t = [("\\(", "\\)"), ("\\[", "\\]"), ("$$", "$$"), ("$", "$")]
        .iter()
        .find_map(|(a, b)| t.strip_prefix(a).and_then(|x| x.trim_end_matches('.').trim_end().strip_suffix(b)))
        .map_or(t, str::trim);
    if t.is_empty() {
        None
    } else {
        Some(t)
    }
}
