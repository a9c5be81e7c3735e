//! `arith`: integer arithmetic whose larger instances need the calculator.
//!
//! Prompts are short and regular (`What is 347*29?`) so a character-level
//! model can learn them; the answer is written `Answer: N`. Level 1–2 are
//! one-digit and two-digit sums a model can do in its head; from level 3
//! products appear and operands grow a digit every level or two; from level 8
//! expressions have two operators.
use super::{calculator_call, Task, MAX_LEVEL};
use arl_core::rng::Rng;
use serde_json::json;

/// Options for the arith family.
#[derive(Debug, Clone, Default)]
pub struct ArithOpts {
    /// Share of demonstrations that skip the calculator and guess a plausible wrong number.
    pub noise: f64,
    /// Mix easy (levels 1..=`easy_level`) and hard problems: easy ones are solved without the tool.
    pub mixed: bool,
    /// Cost per tool call, recorded in `metadata.tool_cost` for `arl-reward`.
    pub tool_cost: Option<f64>,
    /// With `mixed`: share of easy demonstrations that still call the calculator.
    pub easy_tool_rate: f64,
    /// With `mixed`: easy problems are of levels 1..=easy_level (0 counts as 1).
    pub easy_level: u32,
}

fn operand(rng: &mut Rng, digits: u32) -> i64 {
    let lo = if digits <= 1 { 1 } else { 10i64.pow(digits - 1) };
    rng.range(lo, 10i64.pow(digits) - 1)
}

/// An expression and its value, for a level.
pub fn expression(rng: &mut Rng, level: u32) -> (String, i64) {
    let level = level.clamp(1, MAX_LEVEL);
    match level {
        1 => {
            let (a, b) = (operand(rng, 1), operand(rng, 1));
            (format!("{a}+{b}"), a + b)
        }
        2 => {
            let (a, b) = (operand(rng, 2), operand(rng, 1));
            if rng.bool(0.5) {
                (format!("{a}+{b}"), a + b)
            } else {
                (format!("{a}-{b}"), a - b)
            }
        }
        3..=7 => {
            // 3: 2x1, 4: 2x2, 5: 3x2, 6: 3x3, 7: 4x3 digits.
            let (da, db) = [(2, 1), (2, 2), (3, 2), (3, 3), (4, 3)][(level - 3) as usize];
            let (a, b) = (operand(rng, da), operand(rng, db));
            match rng.below(3) {
                0 => (format!("{a}*{b}"), a * b),
                1 => {
                    let (a, b) = (operand(rng, da + 1), operand(rng, da + 1));
                    (format!("{a}+{b}"), a + b)
                }
                _ => (format!("{a}*{b}"), a * b),
            }
        }
        _ => {
            // 8: 3x3+3, 9: 4x3-4, 10: 4x4+4x2.
            let (da, db) = if level == 8 { (3, 3) } else { (4, level - 6) };
            let (a, b) = (operand(rng, da), operand(rng, db.min(4)));
            let c = operand(rng, da);
            if rng.bool(0.5) {
                (format!("{a}*{b}+{c}"), a * b + c)
            } else {
                (format!("{a}*{b}-{c}"), a * b - c)
            }
        }
    }
}

/// A plausible wrong answer: one digit changed, an off-by-a-little, or a
/// slipped carry, never the right value.
pub fn plausible_wrong(rng: &mut Rng, v: i64) -> i64 {
    for _ in 0..16 {
        let w = match rng.below(3) {
            0 => {
                let s = v.abs().to_string();
                let mut d: Vec<u8> = s.into_bytes();
                let i = rng.below(d.len() as u64) as usize;
                let nd = b'0' + rng.below(10) as u8;
                if i == 0 && nd == b'0' && d.len() > 1 {
                    continue;
                }
                d[i] = nd;
                let x: i64 = String::from_utf8_lossy(&d).parse().unwrap_or(v + 1);
                if v < 0 {
                    -x
                } else {
                    x
                }
            }
            1 => v + rng.range(-9, 9),
            _ => {
                v + if rng.bool(0.5) { 10 } else { -10 }
                    * 10i64.pow(rng.below(v.abs().max(1).ilog10() as u64 + 1) as u32)
            }
        };
        if w != v {
            return w;
        }
    }
    v + 1
}

pub fn generate(rng: &mut Rng, level: u32, o: &ArithOpts) -> (Task, u32) {
    let (level, kind) = if o.mixed {
        if rng.bool(0.5) {
            (rng.range(1, o.easy_level.clamp(1, 2) as i64) as u32, "easy")
        } else {
            (level.max(5), "hard")
        }
    } else {
        (level, if level <= 2 { "easy" } else { "hard" })
    };
    let (expr, v) = expression(rng, level);
    let prompt = format!("What is {expr}?");
    let answer = format!("Answer: {v}");
    // Under `mixed`, only hard problems get noisy demonstrations: easy ones
    // are answered in the head, which is right, so there is nothing to guess.
    let noisy = o.noise > 0.0 && !(o.mixed && kind == "easy") && rng.bool(o.noise);
    let mut meta = serde_json::Map::new();
    meta.insert("expression".into(), json!(expr));
    if o.mixed {
        meta.insert("kind".into(), json!(kind));
    }
    if let Some(c) = o.tool_cost {
        meta.insert("tool_cost".into(), json!(c));
    }
    let (response, messages) = if noisy {
        meta.insert("noisy".into(), json!(true));
        let w = format!("Answer: {}", plausible_wrong(rng, v));
        (w.clone(), json!([{"role": "user", "content": prompt}, {"role": "assistant", "content": w}]))
    } else if kind == "easy" && o.mixed && !(o.easy_tool_rate > 0.0 && rng.bool(o.easy_tool_rate)) {
        (answer.clone(), json!([{"role": "user", "content": prompt}, {"role": "assistant", "content": answer}]))
    } else {
        (
            answer.clone(),
            json!([
                {"role": "user", "content": prompt},
                {"role": "assistant", "content": calculator_call(&expr)},
                {"role": "tool", "name": "calculator", "content": v.to_string()},
                {"role": "assistant", "content": answer},
            ]),
        )
    };
    (
        Task {
            prompt,
            label: json!(v.to_string()),
            response,
            messages: Some(messages),
            metadata: meta,
            tools: vec![arl_env::tools::calculator_def()],
        },
        level,
    )
}
