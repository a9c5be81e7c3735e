//! The `math` reward: extract the final answer, normalise it, compare it with
//! the label by value, and refuse hedged answers.
//!
//! Extraction: the last `\boxed{…}` / `\fbox{…}` (nested braces handled), else
//! the last `Answer:` line. Normalisation follows the Hendrycks MATH
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

/// Grading settings.
#[derive(Debug, Clone, Default)]
pub struct MathOpts {
    /// Relative tolerance for numeric comparison; 0 = exact for rationals.
    pub tolerance: f64,
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
            (None, _) => "no \\boxed{} or `Answer:` line found".to_string(),
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

/// The contents of every `\boxed{…}` / `\fbox{…}` (also `\boxed 5`), in order.
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

const UNITS: &[&str] = &[
    "cm", "mm", "km", "m", "meters", "meter", "metres", "centimeters", "inches", "inch", "in", "feet", "foot", "ft", "yards",
    "miles", "mile", "mph", "kg", "g", "grams", "pounds", "lbs", "lb", "ounces", "oz", "liters", "litres", "l", "ml", "gallons",
    "seconds", "second", "sec", "s", "minutes", "minute", "min", "hours", "hour", "hr", "days", "day", "weeks", "years", "year",
    "dollars", "dollar", "cents", "cent", "degrees", "degree", "units", "unit", "sq", "square", "cubic", "people", "students",
    "apples", "items", "books", "points", "percent", "times", "ways", "cookies", "marbles", "pages", "children", "boxes", "cups",
];

fn is_unit_word(w: &str) -> bool {
    let w = w.trim_end_matches('.').trim_end_matches(|c: char| c == '^' || c.is_ascii_digit());
    UNITS.contains(&w.to_ascii_lowercase().as_str())
}

/// Replaces `\cmd{X}` (text-like wrappers) by ` X `.
fn unwrap_text(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    let mut rest = s;
    'outer: loop {
        for kw in ["\\text{", "\\textbf{", "\\textit{", "\\mathrm{", "\\mathbf{", "\\mbox{", "\\textrm{", "\\operatorname{"] {
            if let Some(p) = rest.find(kw) {
                // Take the earliest wrapper first.
                let earliest = ["\\text{", "\\textbf{", "\\textit{", "\\mathrm{", "\\mathbf{", "\\mbox{", "\\textrm{", "\\operatorname{"]
                    .iter()
                    .filter_map(|k| rest.find(k).map(|q| (q, k.len())))
                    .min()
                    .unwrap_or((p, kw.len()));
                let (p, l) = earliest;
                out.push_str(&rest[..p]);
                let body = &rest[p + l..];
                let mut depth = 1;
                let mut end = body.len();
                for (i, c) in body.char_indices() {
                    match c {
                        '{' => depth += 1,
                        '}' => {
                            depth -= 1;
                            if depth == 0 {
                                end = i;
                                break;
                            }
                        }
                        _ => {}
                    }
                }
                out.push(' ');
                out.push_str(&body[..end]);
                out.push(' ');
                rest = if end < body.len() { &body[end + 1..] } else { "" };
                continue 'outer;
            }
        }
        out.push_str(rest);
        return out;
    }
}

/// First normalisation pass: LaTeX noise out, spaces kept (hedge words need them).
fn clean(s: &str) -> String {
    let mut t = unwrap_text(s);
    for (a, b) in [
        ("{,}", ","),
        ("\\left", ""),
        ("\\right", ""),
        ("\\displaystyle", ""),
        ("\\dfrac", "\\frac"),
        ("\\tfrac", "\\frac"),
        ("\\!", ""),
        ("\\,", " "),
        ("\\;", " "),
        ("\\:", " "),
        ("\\quad", " "),
        ("\\qquad", " "),
        ("\\ ", " "),
        ("~", " "),
        ("^{\\circ}", ""),
        ("^\\circ", ""),
        ("\\circ", ""),
        ("°", ""),
        ("\\%", ""),
        ("%", ""),
        ("\\$", ""),
        ("$", ""),
        ("\\cdot", "*"),
        ("\\times", "*"),
        ("×", "*"),
        ("\\div", "/"),
        ("\\approx", ""),
        ("−", "-"),
        ("\\{", "{"),
        ("\\}", "}"),
    ] {
        if t.contains(a) {
            t = t.replace(a, b);
        }
    }
    let t = t.trim().trim_end_matches(['.', ' ']).trim();
    t.to_string()
}

/// Why an answer is a hedge, if it is; `label` is the cleaned label.
fn hedge(ans: &str, label: &str, label_is_list: bool) -> Option<&'static str> {
    let a = ans.to_ascii_lowercase();
    let l = label.to_ascii_lowercase();
    let words: Vec<&str> = a.split(|c: char| !c.is_ascii_alphanumeric()).filter(|w| !w.is_empty()).collect();
    let has_word = |w: &str| words.contains(&w);
    let lwords: Vec<&str> = l.split(|c: char| !c.is_ascii_alphanumeric()).filter(|w| !w.is_empty()).collect();
    if (has_word("or") || a.contains("\\lor") || a.contains("\\vee")) && !lwords.contains(&"or") {
        return Some("or");
    }
    if (a.contains("\\pm") || a.contains('±') || a.contains("\\mp")) && !(l.contains("\\pm") || l.contains('±')) {
        return Some("plus_minus");
    }
    let range_marks = ["\\le", "\\ge", "<", ">", "\\lt", "\\gt", "–", "—", "\\in", "\\sim"];
    if range_marks.iter().any(|m| a.contains(m)) && !range_marks.iter().any(|m| l.contains(m)) {
        return Some("range");
    }
    if (has_word("to") || has_word("between")) && !(lwords.contains(&"to") || lwords.contains(&"between")) {
        return Some("range");
    }
    if is_plain_number(label.trim()) && is_number_dash_number(&a) {
        return Some("range");
    }
    if !label_is_list && top_level_split(&strip_thousands(&a)).len() > 1 {
        return Some("several_candidates");
    }
    if (has_word("and")) && !lwords.contains(&"and") && is_plain_number(label.trim()) {
        return Some("several_candidates");
    }
    None
}

fn is_plain_number(s: &str) -> bool {
    let s = s.strip_prefix('-').unwrap_or(s);
    !s.is_empty() && s.bytes().all(|c| c.is_ascii_digit() || c == b'.' || c == b',') && s.as_bytes()[0].is_ascii_digit()
}

/// `3-5`, `3 - 5`: a range written with a hyphen (not a negative number).
fn is_number_dash_number(s: &str) -> bool {
    let s = s.trim();
    let body = s.strip_prefix('-').unwrap_or(s);
    match body.find('-') {
        Some(p) => {
            let (x, y) = (body[..p].trim(), body[p + 1..].trim());
            is_plain_number(x) && is_plain_number(y)
        }
        None => false,
    }
}

/// `1,000,000` → `1000000`; other commas stay (they separate list items).
fn strip_thousands(s: &str) -> String {
    let b = s.as_bytes();
    if !s.contains(',') {
        return s.to_string();
    }
    let mut out = String::with_capacity(s.len());
    let mut i = 0;
    while i < b.len() {
        if b[i] == b',' && i > 0 && b[i - 1].is_ascii_digit() && i + 3 < b.len() + 1 {
            let next3 = &b[i + 1..(i + 4).min(b.len())];
            let after = b.get(i + 4).copied();
            // The digit run before the comma must be 1-3 long (or follow another group).
            let mut k = i;
            while k > 0 && b[k - 1].is_ascii_digit() {
                k -= 1;
            }
            let run = i - k;
            let before_ok = run >= 1 && run <= 3 && (k == 0 || !matches!(b[k - 1], b'.'));
            if next3.len() == 3 && next3.iter().all(u8::is_ascii_digit) && !after.is_some_and(|c| c.is_ascii_digit()) && before_ok {
                i += 1;
                continue;
            }
        }
        out.push(b[i] as char);
        i += 1;
    }
    // The loop copies bytes as chars; redo safely when non-ASCII is present.
    if s.is_ascii() {
        out
    } else {
        s.to_string()
    }
}

/// Splits at commas and semicolons outside brackets.
fn top_level_split(s: &str) -> Vec<&str> {
    let mut out = Vec::new();
    let mut depth = 0i32;
    let mut start = 0;
    for (i, c) in s.char_indices() {
        match c {
            '(' | '[' | '{' => depth += 1,
            ')' | ']' | '}' => depth -= 1,
            ',' | ';' if depth == 0 => {
                out.push(&s[start..i]);
                start = i + 1;
            }
            _ => {}
        }
    }
    out.push(&s[start..]);
    out.retain(|x| !x.trim().is_empty());
    out
}

/// Second pass: prefixes (`x =`), units, spaces.
fn finish(s: &str) -> String {
    let mut t = s.trim();
    // `x = 5`, `n=5`: keep the right-hand side when the left is a short name.
    if let Some(p) = t.rfind('=') {
        let lhs = t[..p].trim();
        if !lhs.is_empty() && lhs.len() <= 12 && !lhs.contains(['<', '>', '\\']) && lhs.chars().all(|c| c.is_ascii_alphanumeric() || c == '_' || c == ' ' || c == '(' || c == ')') && !t[p + 1..].trim().is_empty() {
            t = t[p + 1..].trim();
        }
    }
    // Units after a number: `12 cm`, `5 square units`, `3 dollars`.
    let mut words: Vec<&str> = t.split_whitespace().collect();
    while words.len() > 1 && is_unit_word(words[words.len() - 1]) {
        words.pop();
    }
    let mut u: String = words.concat();
    // `12cm`: a known unit glued to a number.
    if let Some(p) = u.find(|c: char| c.is_ascii_alphabetic()) {
        if p > 0 && u[..p].bytes().all(|c| c.is_ascii_digit() || c == b'.') && is_unit_word(&u[p..]) && u[p..].len() >= 2 {
            u.truncate(p);
        }
    }
    let u = strip_thousands(&u);
    let u = u.trim_start_matches('+');
    let u = u.strip_suffix('.').unwrap_or(u);
    u.to_string()
}

/// The full normalisation of an answer or a label (as shown in `reward_detail`).
pub fn normalize(s: &str) -> String {
    finish(&clean(s))
}

// ---------------------------------------------------------------------------
// A small expression evaluator: exact rationals where possible, f64 otherwise.

#[derive(Debug, Clone, Copy, PartialEq)]
enum Num {
    Rat(i128, i128),
    Real(f64),
}

fn gcd(mut a: i128, mut b: i128) -> i128 {
    a = a.abs();
    b = b.abs();
    while b != 0 {
        (a, b) = (b, a % b);
    }
    a
}

impl Num {
    fn rat(n: i128, d: i128) -> Num {
        if d == 0 {
            return Num::Real(f64::NAN);
        }
        // i128::MIN has no positive counterpart (`abs`, `-n` overflow): leave exact arithmetic.
        if n == i128::MIN || d == i128::MIN {
            return Num::Real(n as f64 / d as f64);
        }
        let g = gcd(n, d).max(1);
        let (n, d) = (n / g, d / g);
        if d < 0 {
            Num::Rat(-n, -d)
        } else {
            Num::Rat(n, d)
        }
    }
    fn f(self) -> f64 {
        match self {
            Num::Rat(n, d) => n as f64 / d as f64,
            Num::Real(x) => x,
        }
    }
    fn add(self, o: Num) -> Num {
        if let (Num::Rat(a, b), Num::Rat(c, d)) = (self, o) {
            if let (Some(x), Some(y), Some(z)) = (a.checked_mul(d), c.checked_mul(b), b.checked_mul(d)) {
                if let Some(s) = x.checked_add(y) {
                    return Num::rat(s, z);
                }
            }
        }
        Num::Real(self.f() + o.f())
    }
    fn neg(self) -> Num {
        match self {
            Num::Rat(a, b) => Num::Rat(-a, b),
            Num::Real(x) => Num::Real(-x),
        }
    }
    fn mul(self, o: Num) -> Num {
        if let (Num::Rat(a, b), Num::Rat(c, d)) = (self, o) {
            if let (Some(x), Some(y)) = (a.checked_mul(c), b.checked_mul(d)) {
                return Num::rat(x, y);
            }
        }
        Num::Real(self.f() * o.f())
    }
    fn div(self, o: Num) -> Num {
        match o {
            Num::Rat(0, _) => Num::Real(f64::NAN),
            Num::Rat(c, d) => self.mul(Num::rat(d, c)),
            Num::Real(x) => Num::Real(self.f() / x),
        }
    }
    fn pow(self, o: Num) -> Num {
        if let (Num::Rat(a, b), Num::Rat(e, 1)) = (self, o) {
            if (0..=64).contains(&e) {
                if let (Some(x), Some(y)) = (a.checked_pow(e as u32), b.checked_pow(e as u32)) {
                    return Num::rat(x, y);
                }
            } else if (-64..0).contains(&e) && a != 0 {
                if let (Some(x), Some(y)) = (a.checked_pow((-e) as u32), b.checked_pow((-e) as u32)) {
                    return Num::rat(y, x);
                }
            }
        }
        Num::Real(self.f().powf(o.f()))
    }
    fn sqrt(self) -> Num {
        if let Num::Rat(a, b) = self {
            if a >= 0 {
                let (ra, rb) = (isqrt(a), isqrt(b));
                if ra * ra == a && rb * rb == b {
                    return Num::rat(ra, rb);
                }
            }
        }
        Num::Real(self.f().sqrt())
    }
}

fn isqrt(n: i128) -> i128 {
    if n < 0 {
        return -1;
    }
    // The f64 estimate can be above the root: near i128::MAX its square overflows.
    let mut x = (n as f64).sqrt() as i128;
    while x.checked_mul(x).is_none_or(|sq| sq > n) {
        x -= 1;
    }
    while (x + 1).checked_mul(x + 1).is_some_and(|sq| sq <= n) {
        x += 1;
    }
    x
}

#[derive(Debug, Clone, PartialEq)]
enum Tok {
    Num(Num),
    Var(char),
    Op(u8),
    Open(u8),
    Close(u8),
    Cmd(String),
}

fn tokenize(s: &str) -> Option<Vec<Tok>> {
    let b = s.as_bytes();
    let mut out = Vec::new();
    let mut i = 0;
    while i < b.len() {
        let c = b[i];
        match c {
            b' ' => i += 1,
            b'0'..=b'9' | b'.' => {
                let st = i;
                while i < b.len() && (b[i].is_ascii_digit() || b[i] == b'.') {
                    i += 1;
                }
                out.push(Tok::Num(parse_decimal(&s[st..i])?));
            }
            b'+' | b'-' | b'*' | b'/' | b'^' => {
                out.push(Tok::Op(c));
                i += 1;
            }
            b'(' | b'[' | b'{' => {
                out.push(Tok::Open(c));
                i += 1;
            }
            b')' | b']' | b'}' => {
                out.push(Tok::Close(c));
                i += 1;
            }
            b'\\' => {
                let st = i + 1;
                i += 1;
                while i < b.len() && b[i].is_ascii_alphabetic() {
                    i += 1;
                }
                if i == st {
                    return None;
                }
                out.push(Tok::Cmd(s[st..i].to_string()));
            }
            b'a'..=b'z' | b'A'..=b'Z' => {
                out.push(Tok::Var(c as char));
                i += 1;
            }
            _ => return None,
        }
    }
    Some(out)
}

fn parse_decimal(s: &str) -> Option<Num> {
    let (int, frac) = match s.find('.') {
        Some(p) => (&s[..p], &s[p + 1..]),
        None => (s, ""),
    };
    if frac.contains('.') || (int.is_empty() && frac.is_empty()) || int.len() + frac.len() > 30 {
        return s.parse::<f64>().ok().map(Num::Real);
    }
    let digits = format!("{int}{frac}");
    let n: i128 = digits.parse().ok()?;
    let d = 10i128.checked_pow(frac.len() as u32)?;
    Some(Num::rat(n, d))
}

/// An expression tree (kept so expressions with variables can be evaluated at several points).
#[derive(Debug, Clone)]
enum Ex {
    N(Num),
    V(char),
    Add(Box<Ex>, Box<Ex>),
    Mul(Box<Ex>, Box<Ex>),
    Div(Box<Ex>, Box<Ex>),
    Pow(Box<Ex>, Box<Ex>),
    Neg(Box<Ex>),
    Sqrt(Box<Ex>),
    Root(Box<Ex>, Box<Ex>),
}

struct Parser {
    t: Vec<Tok>,
    i: usize,
}

impl Parser {
    fn peek(&self) -> Option<&Tok> {
        self.t.get(self.i)
    }
    fn next(&mut self) -> Option<Tok> {
        let x = self.t.get(self.i).cloned();
        self.i += 1;
        x
    }
    fn expr(&mut self) -> Option<Ex> {
        let mut a = self.term()?;
        loop {
            match self.peek() {
                Some(Tok::Op(b'+')) => {
                    self.i += 1;
                    a = Ex::Add(Box::new(a), Box::new(self.term()?));
                }
                Some(Tok::Op(b'-')) => {
                    self.i += 1;
                    a = Ex::Add(Box::new(a), Box::new(Ex::Neg(Box::new(self.term()?))));
                }
                _ => return Some(a),
            }
        }
    }
    fn term(&mut self) -> Option<Ex> {
        let mut a = self.unary()?;
        loop {
            match self.peek() {
                Some(Tok::Op(b'*')) => {
                    self.i += 1;
                    a = Ex::Mul(Box::new(a), Box::new(self.unary()?));
                }
                Some(Tok::Op(b'/')) => {
                    self.i += 1;
                    a = Ex::Div(Box::new(a), Box::new(self.unary()?));
                }
                // Implicit multiplication: `2\pi`, `3x`, `2(x+1)`, `x y`.
                Some(Tok::Num(_)) | Some(Tok::Var(_)) | Some(Tok::Open(_)) | Some(Tok::Cmd(_)) => {
                    a = Ex::Mul(Box::new(a), Box::new(self.power()?));
                }
                _ => return Some(a),
            }
        }
    }
    fn unary(&mut self) -> Option<Ex> {
        match self.peek() {
            Some(Tok::Op(b'-')) => {
                self.i += 1;
                Some(Ex::Neg(Box::new(self.unary()?)))
            }
            Some(Tok::Op(b'+')) => {
                self.i += 1;
                self.unary()
            }
            _ => self.power(),
        }
    }
    fn power(&mut self) -> Option<Ex> {
        let base = self.primary()?;
        if let Some(Tok::Op(b'^')) = self.peek() {
            self.i += 1;
            let e = match self.peek() {
                Some(Tok::Op(b'-')) => {
                    self.i += 1;
                    Ex::Neg(Box::new(self.primary()?))
                }
                _ => self.primary_single()?,
            };
            return Some(Ex::Pow(Box::new(base), Box::new(e)));
        }
        Some(base)
    }
    /// An exponent or `\frac` argument written without braces: one digit or letter.
    fn primary_single(&mut self) -> Option<Ex> {
        match self.peek()? {
            Tok::Num(Num::Rat(n, 1)) if *n >= 10 => {
                // `x^23` is x^2 * 3 in TeX, but nobody means that; take it whole.
                self.primary()
            }
            _ => self.primary(),
        }
    }
    fn group(&mut self) -> Option<Ex> {
        match self.peek()? {
            Tok::Open(b'{') => self.primary(),
            Tok::Num(Num::Rat(n, 1)) if *n >= 10 => {
                // `\frac12`: TeX takes one digit per argument; the rest stays.
                let s = n.to_string();
                let first: i128 = s[..1].parse().ok()?;
                let rest: i128 = s[1..].parse().ok()?;
                self.t[self.i] = Tok::Num(Num::Rat(rest, 1));
                Some(Ex::N(Num::Rat(first, 1)))
            }
            _ => self.primary(),
        }
    }
    fn primary(&mut self) -> Option<Ex> {
        match self.next()? {
            Tok::Num(n) => Some(Ex::N(n)),
            Tok::Var(c) => Some(Ex::V(c)),
            Tok::Open(o) => {
                let e = self.expr()?;
                let want = match o {
                    b'(' => b')',
                    b'[' => b']',
                    _ => b'}',
                };
                match self.next()? {
                    Tok::Close(c) if c == want => Some(e),
                    _ => None,
                }
            }
            Tok::Cmd(c) => match c.as_str() {
                "frac" => {
                    let a = self.group()?;
                    let b = self.group()?;
                    Some(Ex::Div(Box::new(a), Box::new(b)))
                }
                "sqrt" => {
                    if let Some(Tok::Open(b'[')) = self.peek() {
                        self.i += 1;
                        let n = self.expr()?;
                        if self.next()? != Tok::Close(b']') {
                            return None;
                        }
                        let x = self.group()?;
                        return Some(Ex::Root(Box::new(x), Box::new(n)));
                    }
                    Some(Ex::Sqrt(Box::new(self.group()?)))
                }
                "pi" => Some(Ex::N(Num::Real(std::f64::consts::PI))),
                _ => None,
            },
            _ => None,
        }
    }
}

fn eval(e: &Ex, env: &[(char, f64)]) -> Num {
    match e {
        Ex::N(n) => *n,
        Ex::V(c) => match env.iter().find(|(v, _)| v == c) {
            Some((_, x)) => Num::Real(*x),
            None => Num::Real(f64::NAN),
        },
        Ex::Add(a, b) => eval(a, env).add(eval(b, env)),
        Ex::Mul(a, b) => eval(a, env).mul(eval(b, env)),
        Ex::Div(a, b) => eval(a, env).div(eval(b, env)),
        Ex::Pow(a, b) => eval(a, env).pow(eval(b, env)),
        Ex::Neg(a) => eval(a, env).neg(),
        Ex::Sqrt(a) => eval(a, env).sqrt(),
        Ex::Root(a, n) => Num::Real(eval(a, env).f().powf(1.0 / eval(n, env).f())),
    }
}

fn vars(e: &Ex, out: &mut Vec<char>) {
    match e {
        Ex::N(_) => {}
        Ex::V(c) => {
            if !out.contains(c) {
                out.push(*c)
            }
        }
        Ex::Add(a, b) | Ex::Mul(a, b) | Ex::Div(a, b) | Ex::Pow(a, b) | Ex::Root(a, b) => {
            vars(a, out);
            vars(b, out);
        }
        Ex::Neg(a) | Ex::Sqrt(a) => vars(a, out),
    }
}

/// Longest expression evaluated, in tokens: the parser, `eval` and the tree's
/// drop all recurse, so an answer of thousands of nested brackets or terms
/// would overflow a thread's stack. Real answers are far shorter; longer ones
/// are compared as strings.
const MAX_EXPR_TOKENS: usize = 512;

fn parse_expr(s: &str) -> Option<Ex> {
    if s.is_empty() {
        return None;
    }
    let t = tokenize(s)?;
    if t.len() > MAX_EXPR_TOKENS {
        return None;
    }
    let mut p = Parser { t, i: 0 };
    let e = p.expr()?;
    if p.i != p.t.len() {
        return None;
    }
    Some(e)
}

fn num_eq(a: Num, b: Num, tol: f64) -> bool {
    match (a, b) {
        (Num::Rat(x, y), Num::Rat(z, w)) if tol == 0.0 => x == z && y == w,
        _ => {
            let (x, y) = (a.f(), b.f());
            if !x.is_finite() || !y.is_finite() {
                return false;
            }
            let t = if tol > 0.0 { tol } else { 1e-9 };
            (x - y).abs() <= t * x.abs().max(y.abs()).max(1e-12)
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
            // Equal as functions at fixed, unremarkable points.
            const POINTS: [f64; 3] = [0.7183, 1.4142, 2.2361];
            for k in 0..3 {
                let env: Vec<(char, f64)> = vs.iter().enumerate().map(|(i, c)| (*c, POINTS[(k + i) % 3] + i as f64 * 0.37)).collect();
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

fn strip_brackets(s: &str) -> (&str, bool) {
    let b = s.as_bytes();
    if b.len() >= 2 && matches!((b[0], b[b.len() - 1]), (b'(', b')') | (b'[', b']') | (b'{', b'}')) && top_level_split(&s[1..s.len() - 1]).len() > 1 {
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
    let boxes = boxed_all(response);
    let (extracted, source) = match boxes.last() {
        Some(b) => (Some(*b), Some("boxed")),
        None => (answer_line(response), answer_line(response).map(|_| "answer_line")),
    };
    let mut v = MathVerdict { correct: false, extracted: extracted.map(str::to_string), source, normalized: None, label_normalized: label_norm.clone(), how: "no_answer", hedge: None };
    let Some(mut ex) = extracted else { return v };
    // `\boxed{\boxed{4}}`: the innermost box is the answer.
    while let Some(inner) = boxed_all(ex).pop() {
        if inner.len() >= ex.len() {
            break;
        }
        ex = inner;
    }
    let ans_clean = clean(ex);
    let ans_norm = finish(&ans_clean);
    v.normalized = Some(ans_norm.clone());
    let (label_items, ordered) = strip_brackets(&label_norm);
    let label_list = top_level_split(label_items);
    let label_is_list = label_list.len() > 1;
    if boxes.len() > 1 {
        let mut distinct: Vec<String> = boxes.iter().map(|b| normalize(b)).collect();
        distinct.sort();
        distinct.dedup();
        if distinct.len() > 1 {
            v.hedge = Some("several_boxed");
            v.how = "hedge";
            return v;
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
        return v;
    }
    let (ok, how) = equal_one(&ans_norm, &label_norm, opts.tolerance);
    v.correct = ok;
    v.how = how;
    v
}

#[cfg(test)]
mod tests {
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
