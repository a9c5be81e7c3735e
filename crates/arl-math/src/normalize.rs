//! Normalisation of an answer or a label in the Hendrycks MATH `strip_string`
//! tradition, and the hedges that score 0.

const UNITS: &[&str] = &[
    "cm",
    "mm",
    "km",
    "m",
    "meters",
    "meter",
    "metres",
    "centimeters",
    "inches",
    "inch",
    "in",
    "feet",
    "foot",
    "ft",
    "yards",
    "miles",
    "mile",
    "mph",
    "kg",
    "g",
    "grams",
    "pounds",
    "lbs",
    "lb",
    "ounces",
    "oz",
    "liters",
    "litres",
    "l",
    "ml",
    "gallons",
    "seconds",
    "second",
    "sec",
    "s",
    "minutes",
    "minute",
    "min",
    "hours",
    "hour",
    "hr",
    "days",
    "day",
    "weeks",
    "years",
    "year",
    "dollars",
    "dollar",
    "cents",
    "cent",
    "degrees",
    "degree",
    "units",
    "unit",
    "sq",
    "square",
    "cubic",
    "people",
    "students",
    "apples",
    "items",
    "books",
    "points",
    "percent",
    "times",
    "ways",
    "cookies",
    "marbles",
    "pages",
    "children",
    "boxes",
    "cups",
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
        for kw in
            ["\\text{", "\\textbf{", "\\textit{", "\\mathrm{", "\\mathbf{", "\\mbox{", "\\textrm{", "\\operatorname{"]
        {
            if let Some(p) = rest.find(kw) {
                // Take the earliest wrapper first.
                let earliest = [
                    "\\text{",
                    "\\textbf{",
                    "\\textit{",
                    "\\mathrm{",
                    "\\mathbf{",
                    "\\mbox{",
                    "\\textrm{",
                    "\\operatorname{",
                ]
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
pub(crate) fn clean(s: &str) -> String {
    let mut t = unwrap_text(s);
    // `111, \! 111`: the thousands separator's spaces go with it.
    while t.contains(", \\!") {
        t = t.replace(", \\!", ",\\!");
    }
    for (a, b) in [
        ("{,}", ","),
        // A thousands separator with a negative thin space (MATH writes
        // `11,\! 111,\! 100`).
        (",\\! ", ","),
        (",\\!", ","),
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
    mixed_number(t).unwrap_or_else(|| t.to_string())
}

/// A whole answer that is a mixed number, `15\frac{39}{40}` (a proper
/// fraction right after an integer, as MATH writes them), as the improper
/// fraction `\frac{639}{40}`; else `None`.
fn mixed_number(t: &str) -> Option<String> {
    let (sign, rest) = match t.strip_prefix('-') {
        Some(r) => ("-", r),
        None => ("", t),
    };
    let digits = |s: &str| -> Option<(u64, usize)> {
        let n = s.bytes().take_while(u8::is_ascii_digit).count();
        (n > 0 && n <= 12).then(|| s[..n].parse().ok().map(|v| (v, n)))?
    };
    let (whole, n) = digits(rest)?;
    let rest = rest[n..].trim_start().strip_prefix("\\frac{")?;
    let (num, n) = digits(rest)?;
    let rest = rest[n..].strip_prefix("}{")?;
    let (den, n) = digits(rest)?;
    if &rest[n..] != "}" || den == 0 || num >= den {
        return None;
    }
    Some(format!("{sign}\\frac{{{}}}{{{den}}}", whole.checked_mul(den)?.checked_add(num)?))
}

/// Why an answer is a hedge, if it is; `label` is the cleaned label.
pub(crate) fn hedge(ans: &str, label: &str, label_is_list: bool) -> Option<&'static str> {
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
            // Right after an opening bracket it is a tuple's or an
            // interval's first item (`(12,102)`), not a number.
            let before_ok = (1..=3).contains(&run) && (k == 0 || !matches!(b[k - 1], b'.' | b'(' | b'['));
            if next3.len() == 3
                && next3.iter().all(u8::is_ascii_digit)
                && !after.is_some_and(|c| c.is_ascii_digit())
                && before_ok
            {
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
pub(crate) fn top_level_split(s: &str) -> Vec<&str> {
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
pub(crate) fn finish(s: &str) -> String {
    let mut t = s.trim();
    // `x = 5`, `n=5`: keep the right-hand side when the left is a short name.
    if let Some(p) = t.rfind('=') {
        let lhs = t[..p].trim();
        if !lhs.is_empty()
            && lhs.len() <= 12
            && !lhs.contains(['<', '>', '\\'])
            && lhs.chars().all(|c| c.is_ascii_alphanumeric() || c == '_' || c == ' ' || c == '(' || c == ')')
            && !t[p + 1..].trim().is_empty()
        {
            t = t[p + 1..].trim();
        }
    }
    // Units after a number: `12 cm`, `5 square units`, `3 dollars`.
    let mut words: Vec<&str> = t.split_whitespace().collect();
    while words.len() > 1 && is_unit_word(words[words.len() - 1]) {
        words.pop();
    }
    // A comma followed by a space separates items, never thousands: each
    // word's own separators go before the words are joined.
    let mut u: String = words.iter().map(|w| strip_thousands(w)).collect();
    // `12cm`: a known unit glued to a number.
    if let Some(p) = u.find(|c: char| c.is_ascii_alphabetic()) {
        if p > 0
            && u[..p].bytes().all(|c| c.is_ascii_digit() || c == b'.')
            && is_unit_word(&u[p..])
            && u[p..].len() >= 2
        {
            u.truncate(p);
        }
    }
    let u = u.trim_start_matches('+');
    let u = u.strip_suffix('.').unwrap_or(u);
    u.to_string()
}

/// The full normalisation of an answer or a label (as shown in `reward_detail`).
pub fn normalize(s: &str) -> String {
    finish(&clean(s))
}
