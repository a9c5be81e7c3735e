//! The `math` reward: extract the final answer, normalise it, compare it with
//! the label by value, and refuse hedged answers.
//!
//! Extraction, in the final-answer segment (after any thinking section:
//! `<think>…</think>`, `<thinking>`, `<reasoning>`; one never closed means
//! no answer): the last `\boxed{…}` / `\fbox{…}` (nested braces handled),
//! else the last `Answer:` line (`\( … \)`, `\[ … \]`, `$ … $` around it
//! removed). A model that corrects itself is graded on its last box
//! ("first \boxed{3}, but rechecking, \boxed{5}" reads 5); boxes offered
//! together (`\boxed{3} or \boxed{5}`, `\boxed{3}, \boxed{5}`) are one
//! hedged answer. Open and closed intervals differ: `(1, 2)`, `[1, 2]`,
//! `[1, 2)` are three answers. Normalisation follows the Hendrycks MATH
//! `strip_string` tradition (`\dfrac`→`\frac`, `\left`/`\right`, `^\circ`,
//! `\%`, `\text{}`, units, spaces, `x =` prefixes), then both sides are parsed
//! as expressions: numbers and fractions compare exactly as rationals (decimals
//! are rationals too, so `0.333` ≠ `1/3` unless `tolerance` allows it),
//! irrational values (`\sqrt`, `\pi`) with a relative 1e-9, and expressions
//! with variables by value at fixed random points. What does not parse is
//! compared as a normalised string.
//!
//! A hedged answer scores 0: several distinct boxed answers, `or`, `\pm`, a
//! range (`3 to 5`, `3-5`, `\le`), or a list of candidates where the label is
//! one value. A grader that pays for hedging trains a hedger.
use serde_json::{json, Value};

mod expr;
mod extract;
mod normalize;

use expr::{eval, num_eq, parse_expr, vars};
pub use extract::{after_thinking, answer_line, boxed_all, final_boxes, strip_end_marker};
pub use normalize::normalize;
use normalize::{clean, finish, hedge, top_level_split};

/// Grading settings.
#[derive(Debug, Clone, Default)]
pub struct MathOpts {
    /// Relative tolerance for numeric comparison; 0 = exact for rationals.
    pub tolerance: f64,
    /// Partial credit (0 = off) for a response with neither `\boxed{}` nor
    /// an `Answer:` line whose last number equals the label.
    pub last_number_credit: f64,
}

/// The verdict with everything the grader saw.
#[derive(Debug, Clone, PartialEq)]
pub struct MathVerdict {
    pub correct: bool,
    pub extracted: Option<String>,
    /// `boxed` or `answer_line`.
    pub source: Option<&'static str>,
    pub normalized: Option<String>,
    pub label_normalized: String,
    /// How the match was decided (`value`, `symbolic`, `string`, `list`), or why not.
    pub how: &'static str,
    pub hedge: Option<&'static str>,
    /// The reward: 1 when correct, [`MathOpts::last_number_credit`] for a
    /// right last number without an answer line, else 0.
    pub credit: f64,
}

impl MathVerdict {
    pub fn to_json(&self) -> Value {
        let mut v = json!({
            "extracted": self.extracted,
            "normalized": self.normalized,
            "label_normalized": self.label_normalized,
            "match": self.how,
        });
        if let Some(s) = self.source {
            v["source"] = json!(s);
        }
        if let Some(h) = self.hedge {
            v["hedge"] = json!(h);
        }
        v
    }

    pub fn explain(&self) -> String {
        match (&self.extracted, self.hedge) {
            (None, _) if self.how == "thinking_unclosed" => {
                "the thinking section never closes: no final answer".to_string()
            }
            (None, _) => "no \\boxed{} or `Answer:` line found (after any thinking section)".to_string(),
            (Some(e), Some(h)) => format!("extracted `{e}`: hedged answer ({h}) scores 0"),
            (Some(e), None) => format!(
                "extracted `{e}` → `{}` vs label `{}`: {} ({})",
                self.normalized.as_deref().unwrap_or(""),
                self.label_normalized,
                if self.correct { "equal" } else { "different" },
                self.how
            ),
        }
    }
}

/// Compares two normalised single answers; returns how they matched.
fn equal_one(a: &str, l: &str, tol: f64) -> (bool, &'static str) {
    if a == l {
        return (true, "string");
    }
    // Words (`Yes`, `odd`) are text, not products of one-letter variables.
    let wordy = |s: &str| s.len() >= 2 && s.bytes().all(|c| c.is_ascii_alphabetic());
    if wordy(a) || wordy(l) {
        return (a.eq_ignore_ascii_case(l), "string");
    }
    match (parse_expr(a), parse_expr(l)) {
        (Some(x), Some(y)) => {
            let mut vs = Vec::new();
            vars(&x, &mut vs);
            let mut vl = Vec::new();
            vars(&y, &mut vl);
            if vs.is_empty() && vl.is_empty() {
                return (num_eq(eval(&x, &[]), eval(&y, &[]), tol), "value");
            }
            vs.sort_unstable();
            vl.sort_unstable();
            if vs != vl {
                return (false, "symbolic");
            }
            // Equal as functions at fixed, unremarkable points (digits of e − 2,
            // √2 and √5, not meant as those constants).
            #[allow(clippy::approx_constant)]
            const POINTS: [f64; 3] = [0.7183, 1.4142, 2.2361];
            for k in 0..3 {
                let env: Vec<(char, f64)> =
                    vs.iter().enumerate().map(|(i, c)| (*c, POINTS[(k + i) % 3] + i as f64 * 0.37)).collect();
                let (p, q) = (eval(&x, &env).f(), eval(&y, &env).f());
                if !(p.is_finite() && q.is_finite() && (p - q).abs() <= 1e-9 * p.abs().max(q.abs()).max(1.0)) {
                    return (false, "symbolic");
                }
            }
            (true, "symbolic")
        }
        _ => (a.eq_ignore_ascii_case(l), "string"),
    }
}

/// The brackets of a two-ended interval (`(a, b)`, `[a, b)`, …): its first
/// and last character, when both are `(`/`[` and `)`/`]` around two items.
fn interval_brackets(s: &str) -> Option<(u8, u8)> {
    let b = s.as_bytes();
    (b.len() >= 2
        && matches!(b[0], b'(' | b'[')
        && matches!(b[b.len() - 1], b')' | b']')
        && top_level_split(&s[1..s.len() - 1]).len() == 2)
        .then(|| (b[0], b[b.len() - 1]))
}

fn strip_brackets(s: &str) -> (&str, bool) {
    let b = s.as_bytes();
    if b.len() >= 2
        && matches!((b[0], b[b.len() - 1]), (b'(' | b'[', b')' | b']') | (b'{', b'}'))
        && top_level_split(&s[1..s.len() - 1]).len() > 1
    {
        (&s[1..s.len() - 1], true)
    } else {
        (s, false)
    }
}

/// The label as text: a JSON string, a number, or a one-element list.
pub fn label_text(label: &Value) -> Option<String> {
    match label {
        Value::String(s) => Some(s.clone()),
        Value::Number(n) => Some(n.to_string()),
        Value::Array(a) if a.len() == 1 => label_text(&a[0]),
        Value::Object(o) => o.get("answer").or_else(|| o.get("ground_truth")).and_then(label_text),
        _ => None,
    }
}

/// Grades one response against the label text.
pub fn grade(response: &str, label: &str, opts: &MathOpts) -> MathVerdict {
    let label_src = boxed_all(label).pop().unwrap_or(label);
    let label_clean = clean(label_src);
    let label_norm = finish(&label_clean);
    let Some(response) = after_thinking(response) else {
        // Truncated inside its thinking section: no final answer.
        return MathVerdict {
            correct: false,
            extracted: None,
            source: None,
            normalized: None,
            label_normalized: label_norm,
            how: "thinking_unclosed",
            hedge: None,
            credit: 0.0,
        };
    };
    let boxes = final_boxes(response);
    let (extracted, source) = match boxes.last() {
        Some(b) => (Some(*b), Some("boxed")),
        None => (answer_line(response), answer_line(response).map(|_| "answer_line")),
    };
    let mut v = MathVerdict {
        correct: false,
        extracted: extracted.map(str::to_string),
        source,
        normalized: None,
        label_normalized: label_norm.clone(),
        how: "no_answer",
        hedge: None,
        credit: 0.0,
    };
    let Some(mut ex) = extracted else {
        if opts.last_number_credit > 0.0 {
            if let Some(n) = last_number(response) {
                let norm = finish(&clean(n));
                if equal_one(&norm, &label_norm, opts.tolerance).0 {
                    v.extracted = Some(n.to_string());
                    v.source = Some("last_number");
                    v.normalized = Some(norm);
                    v.how = "last_number";
                    v.credit = opts.last_number_credit;
                }
            }
        }
        return v;
    };
    // `\boxed{\boxed{4}}`: the innermost box is the answer.
    while let Some(inner) = boxed_all(ex).pop() {
        if inner.len() >= ex.len() {
            break;
        }
        ex = inner;
    }
    let mut ans_clean = clean(ex);
    let mut ans_norm = finish(&ans_clean);
    v.normalized = Some(ans_norm.clone());
    // Intervals: the bracket kinds are part of the answer.
    if let (Some(a), Some(l)) = (interval_brackets(&ans_norm), interval_brackets(&label_norm)) {
        if a != l {
            v.how = "interval";
            return v;
        }
    }
    let (label_items, ordered) = strip_brackets(&label_norm);
    let label_list = top_level_split(label_items);
    let label_is_list = label_list.len() > 1;
    if boxes.len() > 1 {
        let mut distinct: Vec<String> = boxes.iter().map(|b| normalize(b)).collect();
        distinct.sort();
        distinct.dedup();
        // Boxes that differ in form but not in value (`\boxed{15\frac{39}{40}}`,
        // or `\boxed{\frac{639}{40}}`) are one answer written twice.
        let same_value = || boxes.iter().all(|b| equal_one(&finish(&clean(b)), &ans_norm, opts.tolerance).0);
        if distinct.len() > 1 && !same_value() {
            if label_is_list && boxes.len() == label_list.len() {
                // `\boxed{-2}` and `\boxed{1}` for a two-item answer: the
                // boxes are its items (MATH writes answers so).
                ans_clean = boxes.iter().map(|b| clean(b)).collect::<Vec<_>>().join(", ");
                ans_norm = finish(&ans_clean);
                v.normalized = Some(ans_norm.clone());
            } else {
                v.hedge = Some("several_boxed");
                v.how = "hedge";
                return v;
            }
        }
    }
    if let Some(h) = hedge(&ans_clean, &label_clean, label_is_list) {
        v.hedge = Some(h);
        v.how = "hedge";
        return v;
    }
    if label_is_list {
        let (a_items, _) = strip_brackets(&ans_norm);
        let mut al: Vec<&str> = top_level_split(a_items);
        if al.len() != label_list.len() {
            v.how = "list";
            return v;
        }
        if ordered {
            v.correct = al.iter().zip(&label_list).all(|(a, l)| equal_one(a.trim(), l.trim(), opts.tolerance).0);
        } else {
            // Unordered: greedy matching is exact here since equality is transitive.
            v.correct = label_list.iter().all(|l| {
                match al.iter().position(|a| equal_one(a.trim(), l.trim(), opts.tolerance).0) {
                    Some(p) => {
                        al.swap_remove(p);
                        true
                    }
                    None => false,
                }
            });
        }
        v.how = "list";
        v.credit = if v.correct { 1.0 } else { 0.0 };
        return v;
    }
    let (ok, how) = equal_one(&ans_norm, &label_norm, opts.tolerance);
    v.correct = ok;
    v.how = how;
    v.credit = if ok { 1.0 } else { 0.0 };
    v
}

/// The last number of a text (`-12`, `1,234`, `3.5`), without a trailing period.
fn last_number(text: &str) -> Option<&str> {
    let b = text.as_bytes();
    let mut end = b.len();
    while end > 0 && !b[end - 1].is_ascii_digit() {
        end -= 1;
    }
    if end == 0 {
        return None;
    }
    let mut start = end;
    while start > 0 && (b[start - 1].is_ascii_digit() || b[start - 1] == b',' || b[start - 1] == b'.') {
        start -= 1;
    }
    while start < end && !b[start].is_ascii_digit() {
        start += 1;
    }
    if start > 0 && b[start - 1] == b'-' {
        start -= 1;
    }
    Some(&text[start..end])
}

/// Whether a normalised answer only restates a computation of the prompt
/// (`9+8` for "What is 9+8?"): an answer with an operator that occurs in the
/// prompt as it stands (white space aside). An RL policy on arithmetic found
/// that a grader comparing by value paid for repeating the question's
/// expression; `arl-reward` scores such answers 0 (`match: "restated"`).
///
/// An occurrence that is a whole LaTeX group of a larger expression (the
/// `1+2i` of `\frac{-3+4i}{1+2i}`) or glued to more digits is a part of the
/// prompt's computation, not a restatement of it.
pub fn restates_prompt(answer: &str, prompt: &str) -> bool {
    // White space and brackets aside: `(7+9)` restates "What is 7+9?" too.
    let skip = |c: &char| c.is_whitespace() || matches!(c, '(' | ')' | '[' | ']' | '{' | '}');
    let a: Vec<char> = answer.chars().filter(|c| !skip(c)).collect();
    let body = a.strip_prefix(&['-']).unwrap_or(&a);
    let has_operator = body.iter().any(|c| matches!(c, '+' | '-' | '*' | '/' | '^' | '×' | '÷'));
    if !has_operator {
        return false;
    }
    // The prompt compacted the same way, each character marked with whether a
    // `{` opens just before it and a `}` closes just after it.
    let mut p: Vec<(char, bool, bool)> = Vec::new();
    let mut open = false;
    for c in prompt.chars() {
        match c {
            '{' => open = true,
            '}' => {
                if let Some(last) = p.last_mut() {
                    last.2 = true;
                }
            }
            c if skip(&c) => {}
            c => {
                p.push((c, open, false));
                open = false;
            }
        }
    }
    let n = a.len();
    (0..p.len().saturating_sub(n - 1)).any(|i| {
        let hit = p[i..i + n].iter().zip(&a).all(|(q, c)| q.0 == *c);
        let group = p[i].1 && p[i + n - 1].2;
        // A digit, a point or a sign right before it: part of a longer number.
        let part = |k: Option<&(char, bool, bool)>, sign: bool| {
            k.is_some_and(|q| q.0.is_ascii_digit() || q.0 == '.' || (sign && q.0 == '-'))
        };
        let glued = (i > 0 && part(p.get(i - 1), true)) || part(p.get(i + n), false);
        hit && !group && !glued
    })
}

#[cfg(test)]
mod tests {
    use super::expr::isqrt;
    use super::*;

    fn g(resp: &str, label: &str) -> bool {
        grade(resp, label, &MathOpts::default()).correct
    }

    #[test]
    fn extraction() {
        assert_eq!(boxed_all("a \\boxed{\\frac{1}{2}} b \\boxed{3}"), vec!["\\frac{1}{2}", "3"]);
        assert_eq!(boxed_all("\\boxed{{a}{b}}"), vec!["{a}{b}"]);
        assert_eq!(boxed_all("so \\boxed 5 done"), vec!["5"]);
        assert_eq!(boxed_all("\\boxed{unclosed"), Vec::<&str>::new());
        assert_eq!(answer_line("work\nAnswer: 42\n"), Some("42"));
        assert_eq!(answer_line("**Answer:** 7"), Some("7"));
        assert_eq!(answer_line("Answer: 18855<|im_end|>"), Some("18855"));
        assert_eq!(answer_line("Answer: 5</s>"), Some("5"));
        assert_eq!(answer_line("Answer: <|im_end|>"), None);
    }

    #[test]
    fn math500_references_that_tripped_the_grader() {
        let o = MathOpts::default();
        // Thousands separators with a negative thin space.
        let r = grade("so $\\boxed{11,\\! 111,\\! 111,\\! 100}$.", "11,\\! 111,\\! 111,\\! 100", &o);
        assert!(r.correct, "{r:?}");
        assert!(grade("\\boxed{11,\\! 111}", "11111", &o).correct);
        assert!(!grade("\\boxed{11,\\! 112}", "11111", &o).correct);
        // One answer in two forms is not a hedge; two different ones are.
        let two = "$d = \\boxed{15\\frac{39}{40}},$ or $\\boxed{\\frac{639}{40}}$ inches.";
        assert!(grade(two, "\\frac{639}{40}", &o).correct, "{:?}", grade(two, "\\frac{639}{40}", &o));
        // Mixed numbers, as MATH writes them, are their value.
        assert!(grade("\\boxed{2\\frac{1}{4}}", "\\frac{9}{4}", &o).correct);
        assert!(grade("\\boxed{-2\\frac{1}{4}}", "-2.25", &o).correct);
        assert!(!grade("\\boxed{2\\frac{1}{4}}", "\\frac{1}{2}", &o).correct);
        let hedged = "$\\boxed{15\\frac{38}{40}},$ or $\\boxed{\\frac{639}{40}}$";
        assert_eq!(grade(hedged, "\\frac{639}{40}", &o).hedge, Some("several_boxed"));
        // A sub-expression of the prompt is not a restatement of it.
        assert!(!restates_prompt("1+2i", "Simplify $\\dfrac{-3+4i}{1+2i}$. Your answer should be of the form $a+bi$"));
        assert!(restates_prompt("-3+4i", "Compute $-3+4i$."));
        assert!(!restates_prompt("(4,-7)", "The graph passes through the point $(-4,-7).$ What other point?"));
        // Several boxes for an answer of several items are its items.
        let both = "the answers are $\\boxed{-2}$ and $\\boxed{1}$.";
        assert!(grade(both, "-2, 1", &o).correct, "{:?}", grade(both, "-2, 1", &o));
        assert!(!grade(both, "-2, 3", &o).correct);
        assert_eq!(grade(both, "1", &o).hedge, Some("several_boxed"), "one answer asked: a hedge");
        // A list of angles is not a number with a thousands separator.
        assert!(grade("\\boxed{45^\\circ, 135^\\circ}", "45^\\circ, 135^\\circ", &o).correct);
        assert!(!grade("\\boxed{45135}", "45^\\circ, 135^\\circ", &o).correct);
        assert!(grade("\\boxed{111, \\! 111, \\! 111}", "111111111", &o).correct);
        // A tuple's items are not a number with a thousands separator.
        assert!(grade("\\boxed{(2, 12) \\cup (12, 102)}", "(2,12) \\cup (12,102)", &o).correct);
        assert!(!grade("\\boxed{(2, 12) \\cup (12102)}", "(2,12) \\cup (12,102)", &o).correct);
        assert!(grade("\\boxed{12,102}", "12102", &o).correct, "outside brackets it is one number");
    }

    #[test]
    fn a_restated_computation_is_recognised() {
        assert!(restates_prompt("9+8", "What is 9 + 8?"));
        assert!(restates_prompt("80-9", "What is 80-9? Reply in the form: The answer is N."));
        assert!(restates_prompt("347*29", "What is 347*29?"));
        assert!(restates_prompt("(7+9)", "What is 7+9?"), "found in a later run: brackets around it");
        assert!(!restates_prompt("17", "What is 9+8?"), "a number is a result");
        assert!(!restates_prompt("-5", "What is -2-3?"));
        assert!(!restates_prompt("24/2", "What is 3*4?"), "a computation the prompt does not hold");
    }

    #[test]
    fn last_number_credit_only_without_an_answer_line() {
        let o = MathOpts { last_number_credit: 0.5, ..MathOpts::default() };
        let c = |r: &str, l: &str| grade(r, l, &o).credit;
        assert_eq!(c("9 + 8 = 17", "17"), 0.5);
        assert_eq!(c("It is -1,204.", "-1204"), 0.5);
        assert_eq!(c("9 + 8 = 16", "17"), 0.0);
        assert_eq!(c("The answer is 17.", "17"), 1.0);
        assert_eq!(c("Answer: 16\nno wait, 17", "17"), 0.0, "an answer line decides");
        assert_eq!(grade("9 + 8 = 17", "17", &MathOpts::default()).credit, 0.0, "off by default");
        assert!(!grade("9 + 8 = 17", "17", &o).correct);
    }

    #[test]
    fn equal_forms_match() {
        let cases = [
            ("\\boxed{\\frac{1}{2}}", "0.5"),
            ("\\boxed{\\dfrac{1}{2}}", "\\frac12"),
            ("\\boxed{0.50}", "1/2"),
            ("Answer: 12 cm", "12"),
            ("\\boxed{90^\\circ}", "90"),
            ("\\boxed{1,000}", "1000"),
            ("\\boxed{x = 5}", "5"),
            ("\\boxed{\\left(1, 2\\right)}", "(1,2)"),
            ("\\boxed{2\\sqrt{3}}", "\\sqrt{12}"),
            ("\\boxed{\\$5.00}", "5"),
            ("\\boxed{2x+1}", "1+2x"),
            ("\\boxed{\\text{5 dollars}}", "5"),
            ("\\boxed{3, 1, 2}", "1, 2, 3"),
            ("\\boxed{50\\%}", "50"),
            ("\\boxed{-3}", "-3"),
        ];
        for (r, l) in cases {
            assert!(g(r, l), "{r} vs {l}: {:?}", grade(r, l, &MathOpts::default()));
        }
    }

    #[test]
    fn the_final_answer_is_after_thinking_and_in_the_last_box() {
        let score = |resp: &str, label: &str| {
            let v = grade(resp, label, &MathOpts::default());
            (v.credit, v.how)
        };
        // A reasoning model: only what follows its thinking section counts.
        assert_eq!(score("<think>maybe \\boxed{3}</think> So \\boxed{5}.", "5").0, 1.0);
        assert_eq!(score("<think>it is \\boxed{5}</think> So \\boxed{3}.", "5").0, 0.0);
        assert_eq!(score("<think>The answer is 5</think>", "5"), (0.0, "no_answer"));
        assert_eq!(score("<think>The answer is 5, so \\boxed{5}", "5"), (0.0, "thinking_unclosed"));
        assert_eq!(score("<reasoning>x</reasoning>Answer: 5", "5").0, 1.0);
        // Self-correction: the last box; boxes offered together: a hedge.
        assert_eq!(score("First \\boxed{3}, but rechecking the sum it is \\boxed{5}.", "5").0, 1.0);
        assert_eq!(score("\\boxed{3}\n\nWait, I made an error. \\boxed{5}", "5").0, 1.0);
        for hedge in [
            "\\boxed{3} or \\boxed{5}",
            "\\boxed{3}, \\boxed{5}",
            "\\boxed{3}. Alternatively, \\boxed{5}.",
            "\\boxed{5} or maybe \\boxed{3}",
        ] {
            assert_eq!(score(hedge, "5"), (0.0, "hedge"), "{hedge}");
        }
        // An empty box echoes the instruction; it is no answer.
        assert_eq!(score("13. To put this in \\boxed{} format", "13"), (0.0, "no_answer"));
        assert_eq!(score("\\boxed{13} then \\boxed{ }", "13").0, 1.0);
        // The same value boxed twice is one answer.
        assert_eq!(score("\\boxed{5} and \\boxed{5}", "5").0, 1.0);
        // Math delimiters on an Answer: line.
        for a in ["Answer: \\( 5 \\)", "Answer: \\[ 5 \\]", "Answer: $5$.", "**Answer:** $$5$$"] {
            assert_eq!(score(a, "5").0, 1.0, "{a}");
        }
        // Intervals: open and closed ends differ; the same interval scores.
        assert_eq!(score("\\boxed{(1, 2)}", "[1, 2]"), (0.0, "interval"));
        assert_eq!(score("\\boxed{[1, 2)}", "[1, 2]"), (0.0, "interval"));
        assert_eq!(score("\\boxed{[1, 2)}", "[1,2)").0, 1.0);
        assert_eq!(score("\\boxed{(-\\infty, 3]}", "(-\\infty, 3]").0, 1.0);
        // A list answer that matches scores its credit.
        assert_eq!(score("\\boxed{2, 3}", "3, 2"), (1.0, "list"));
    }

    #[test]
    fn near_misses_and_hedges_fail() {
        let cases = [
            ("\\boxed{0.333}", "\\frac{1}{3}"),
            ("\\boxed{3 \\text{ or } 4}", "3"),
            ("\\boxed{3} or \\boxed{4}", "4"),
            ("\\boxed{3, 4}", "3"),
            ("\\boxed{3-5}", "4"),
            ("\\boxed{3 \\le x \\le 5}", "4"),
            ("\\boxed{\\pm 2}", "2"),
            ("Answer: between 3 and 5", "4"),
            ("\\boxed{3.14}", "\\pi"),
            ("\\boxed{(2, 1)}", "(1,2)"),
            ("\\boxed{2x}", "2y"),
            ("no answer here", "5"),
        ];
        for (r, l) in cases {
            assert!(!g(r, l), "{r} vs {l} should fail: {:?}", grade(r, l, &MathOpts::default()));
        }
    }

    /// Found by fuzzing (fuzz/fuzz_targets/math_normalize.rs): a product equal
    /// to i128::MIN overflowed `abs` in `gcd` (a panic with overflow checks).
    #[test]
    fn i128_min_product_does_not_overflow() {
        let v = grade("\\boxed{-9223372036854775808*18446744073709551616}", "1", &MathOpts::default());
        assert!(!v.correct);
        assert!(g("\\boxed{-9223372036854775808*18446744073709551616}", "-170141183460469231731687303715884105728"));
        let r = 13043817825332782212i128;
        assert_eq!(isqrt(r * r), r);
        assert_eq!(isqrt(i128::MAX), r);
    }

    /// Found by fuzzing: thousands of nested brackets overflowed the stack in
    /// the recursive parser; long expressions are now compared as strings.
    #[test]
    fn deep_or_long_expressions_do_not_overflow_the_stack() {
        let deep = format!("\\boxed{{{}1{}}}", "(".repeat(5000), ")".repeat(5000));
        let long = format!("\\boxed{{{}1}}", "1+".repeat(50_000));
        // On a small stack, as rayon and tokio workers have.
        std::thread::Builder::new()
            .stack_size(256 * 1024)
            .spawn(move || {
                assert!(!g(&deep, "1"));
                assert!(!g(&long, "50001"));
            })
            .unwrap()
            .join()
            .unwrap();
        assert!(g("\\boxed{((((2))))}", "2"));
    }
}
