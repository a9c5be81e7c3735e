//! `exact`, `f1` (SQuAD token F1) and `regex` rewards.
use crate::score::{Score, ScoreError};
use serde_json::{json, Value};

/// The answer part of a response: the last `\boxed{}`, else the last `Answer:`
/// line, else the whole response up to a trailing end-of-turn marker, trimmed.
pub fn answer_part(resp: &str) -> (&str, &'static str) {
    if let Some(b) = arl_math::boxed_all(resp).pop() {
        return (b.trim(), "boxed");
    }
    if let Some(a) = arl_math::answer_line(resp) {
        return (a, "answer_line");
    }
    (arl_math::strip_end_marker(resp).trim(), "response")
}

fn labels(label: &Value) -> Result<Vec<String>, ScoreError> {
    match label {
        Value::String(s) => Ok(vec![s.clone()]),
        Value::Number(n) => Ok(vec![n.to_string()]),
        Value::Array(a) => a.iter().map(|x| labels(x).map(|mut v| v.remove(0))).collect(),
        Value::Object(o) => match o.get("answers").or_else(|| o.get("answer")) {
            Some(v) => labels(v),
            None => {
                Err(ScoreError("field `label`: expected a string, a list of strings or {\"answers\": [...]}".into()))
            }
        },
        _ => Err(ScoreError("field `label`: expected a string or a list of strings".into())),
    }
}

/// 1 when the answer part equals one of the labels (trimmed, whitespace runs collapsed).
pub fn exact(resp: &str, label: &Value) -> Result<Score, ScoreError> {
    let (ans, from) = answer_part(resp);
    let squash = |s: &str| s.split_whitespace().collect::<Vec<_>>().join(" ");
    let a = squash(ans);
    let ls = labels(label)?;
    let hit = ls.iter().find(|l| squash(l) == a);
    let r = if hit.is_some() { 1.0 } else { 0.0 };
    Ok(Score {
        reward: r,
        detail: json!({"extracted": a, "source": from, "labels": ls}),
        explain: format!("`{a}` {} the label", if hit.is_some() { "equals" } else { "differs from" }),
    })
}

/// SQuAD normalisation: lower case, no punctuation, no articles, single spaces.
pub fn squad_normalize(s: &str) -> Vec<String> {
    let lower = s.to_lowercase();
    let no_punct: String = lower.chars().map(|c| if c.is_ascii_punctuation() { ' ' } else { c }).collect();
    no_punct.split_whitespace().filter(|w| !matches!(*w, "a" | "an" | "the")).map(str::to_string).collect()
}

/// Token F1 (SQuAD v1.1 evaluate script), max over the labels.
pub fn token_f1(pred: &str, gold: &str) -> f32 {
    let p = squad_normalize(pred);
    let g = squad_normalize(gold);
    if p.is_empty() || g.is_empty() {
        return if p == g { 1.0 } else { 0.0 };
    }
    let mut counts: std::collections::HashMap<&str, i32> = std::collections::HashMap::new();
    for w in &g {
        *counts.entry(w).or_default() += 1;
    }
    let mut common = 0;
    for w in &p {
        if let Some(c) = counts.get_mut(w.as_str()) {
            if *c > 0 {
                *c -= 1;
                common += 1;
            }
        }
    }
    if common == 0 {
        return 0.0;
    }
    let prec = common as f32 / p.len() as f32;
    let rec = common as f32 / g.len() as f32;
    2.0 * prec * rec / (prec + rec)
}

pub fn f1(resp: &str, label: &Value) -> Result<Score, ScoreError> {
    let (ans, from) = answer_part(resp);
    let ls = labels(label)?;
    let (best, which) = ls.iter().map(|l| (token_f1(ans, l), l)).fold((0.0f32, None), |acc, (f, l)| {
        if f > acc.0 || acc.1.is_none() {
            (f, Some(l))
        } else {
            acc
        }
    });
    Ok(Score {
        reward: best,
        detail: json!({"extracted": ans, "source": from, "best_label": which, "f1": best}),
        explain: format!("token F1 {best:.3} of `{ans}` against `{}`", which.map(String::as_str).unwrap_or("")),
    })
}

pub fn regex_reward(resp: &str, re: &regex::Regex, weight: f32) -> Score {
    let m = re.find(resp);
    Score {
        reward: if m.is_some() { weight } else { 0.0 },
        detail: json!({"pattern": re.as_str(), "matched": m.map(|x| x.as_str())}),
        explain: format!("pattern `{}` {}", re.as_str(), if m.is_some() { "matched" } else { "did not match" }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn squad_f1() {
        assert_eq!(token_f1("The cat sat", "cat sat"), 1.0);
        // P = 2/4, R = 2/2 → F1 = 2/3.
        assert!((token_f1("a cat sat on mat", "the cat sat") - 2.0 / 3.0).abs() < 1e-6);
        assert_eq!(token_f1("dog", "cat"), 0.0);
    }

    #[test]
    fn exact_uses_answer_part() {
        assert_eq!(exact("bla\nAnswer: Paris", &json!("Paris")).unwrap().reward, 1.0);
        assert_eq!(exact("\\boxed{paris}", &json!(["Paris"])).unwrap().reward, 0.0);
    }
}
