//! `math`: single-turn word and equation problems; the answer goes in `\boxed{}`.
//! Problem kinds rotate with the index; numbers grow with the level.
use super::{Task, MAX_LEVEL};
use arl_core::rng::Rng;
use serde_json::json;

fn gcd(a: i64, b: i64) -> i64 {
    if b == 0 {
        a.abs()
    } else {
        gcd(b, a % b)
    }
}

/// `p/q` in lowest terms as LaTeX (`\frac{p}{q}`, or an integer).
pub fn frac_tex(p: i64, q: i64) -> String {
    let g = gcd(p, q).max(1);
    let (mut p, mut q) = (p / g, q / g);
    if q < 0 {
        p = -p;
        q = -q;
    }
    if q == 1 {
        p.to_string()
    } else if p < 0 {
        format!("-\\frac{{{}}}{{{q}}}", -p)
    } else {
        format!("\\frac{{{p}}}{{{q}}}")
    }
}

const SUFFIX: &str = "Put the final answer in \\boxed{}.";

pub fn generate(rng: &mut Rng, level: u32) -> Task {
    let l = level.clamp(1, MAX_LEVEL) as i64;
    let big = 5 * l * l + 5; // the scale of the numbers
    let (problem, work, answer) = match rng.below(5) {
        0 => {
            // Linear equation a x + b = c with an integer solution.
            let x = rng.range(-big, big);
            let a = rng.range(2, 2 + l * 2);
            let b = rng.range(-big, big);
            let c = a * x + b;
            let bs = if b < 0 { format!("- {}", -b) } else { format!("+ {b}") };
            (format!("Solve for x: {a}x {bs} = {c}."), format!("{a}x = {}, so x = {x}.", c - b), x.to_string())
        }
        1 => {
            // Sum of two fractions.
            let (q1, q2) = (rng.range(2, 3 + l), rng.range(2, 3 + l));
            let (p1, p2) = (rng.range(1, q1 - 1).max(1), rng.range(1, q2 - 1).max(1));
            let (p, q) = (p1 * q2 + p2 * q1, q1 * q2);
            (
                format!("Compute \\frac{{{p1}}}{{{q1}}} + \\frac{{{p2}}}{{{q2}}} as a fraction in lowest terms."),
                format!(
                    "The common denominator is {q}: \\frac{{{}}}{{{q}}} + \\frac{{{}}}{{{q}}} = {}.",
                    p1 * q2,
                    p2 * q1,
                    frac_tex(p, q)
                ),
                frac_tex(p, q),
            )
        }
        2 => {
            // Percent of a number, integral.
            let pct = *rng.choose(&[5i64, 10, 15, 20, 25, 30, 40, 50, 60, 75]);
            let n = 20 * rng.range(1, big.max(2));
            let v = pct * n / 100;
            (format!("What is {pct}% of {n}?"), format!("{pct}% of {n} is {n} * {pct} / 100 = {v}."), v.to_string())
        }
        3 => {
            // Rectangle area with units.
            let (w, h) = (rng.range(2, big), rng.range(2, big));
            (
                format!("A rectangle is {w} cm wide and {h} cm long. What is its area in square centimeters?"),
                format!("The area is {w} * {h} = {} square centimeters.", w * h),
                (w * h).to_string(),
            )
        }
        _ => {
            // Greatest common divisor.
            let g = rng.range(2, 3 + l * 3);
            let (a, b) = (g * rng.range(2, 2 + l * 4), g * rng.range(2, 2 + l * 4));
            let d = gcd(a, b);
            (
                format!("What is the greatest common divisor of {a} and {b}?"),
                format!("gcd({a}, {b}) = {d}."),
                d.to_string(),
            )
        }
    };
    let prompt = format!("{problem} {SUFFIX}");
    let response = format!("{work}\n\\boxed{{{answer}}}");
    Task { prompt, label: json!(answer), response, messages: None, metadata: serde_json::Map::new(), tools: vec![] }
}
