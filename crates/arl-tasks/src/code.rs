//! `code`: small Python functions to write, with hidden unit tests.
//!
//! The label follows docs/DESIGN.md §3: `{"tests": ["assert f(…) == …", …]}` plus
//! `entry_point`. The prompt shows one example call; the tests use other
//! inputs. The expected values are computed here in Rust, independently of
//! the Python reference solution, so a wrong reference would be caught by
//! `arl-tasks code --with-solutions | arl-reward --rm code`.
use super::{Task, MAX_LEVEL};
use arl_core::rng::Rng;
use serde_json::json;

fn py_list(xs: &[i64]) -> String {
    format!("[{}]", xs.iter().map(|x| x.to_string()).collect::<Vec<_>>().join(", "))
}

fn py_str(s: &str) -> String {
    // ASCII letters and spaces only here, so JSON quoting is valid Python.
    serde_json::to_string(s).unwrap_or_default()
}

fn py_bool(b: bool) -> String {
    if b { "True" } else { "False" }.to_string()
}

fn ints(rng: &mut Rng, n: usize, lo: i64, hi: i64) -> Vec<i64> {
    (0..n).map(|_| rng.range(lo, hi)).collect()
}

fn word(rng: &mut Rng, len: usize) -> String {
    (0..len).map(|_| (b'a' + rng.below(26) as u8) as char).collect()
}

/// Name, description, reference solution, and an (args, expected) generator.
struct Tpl {
    name: &'static str,
    desc: &'static str,
    solution: &'static str,
    level: u32,
    case: fn(&mut Rng, u32) -> (String, String),
}

const TEMPLATES: &[Tpl] = &[
    Tpl {
        name: "total",
        desc: "returns the sum of a list of integers (0 for an empty list)",
        solution: "def total(xs):\n    return sum(xs)\n",
        level: 1,
        case: |r, l| {
            let n = r.below(3 + l as u64 * 2) as usize;
            let xs = ints(r, n, -50, 50);
            (py_list(&xs), xs.iter().sum::<i64>().to_string())
        },
    },
    Tpl {
        name: "count_vowels",
        desc: "returns how many characters of a lowercase string are vowels (a, e, i, o, u)",
        solution: "def count_vowels(s):\n    return sum(1 for c in s if c in 'aeiou')\n",
        level: 1,
        case: |r, l| {
            let n = r.below(4 + l as u64 * 3) as usize;
            let s = word(r, n);
            let n = s.chars().filter(|c| "aeiou".contains(*c)).count();
            (py_str(&s), n.to_string())
        },
    },
    Tpl {
        name: "max_gap",
        desc: "returns the largest difference between two consecutive elements (later minus earlier) of a list of at least two integers",
        solution: "def max_gap(xs):\n    return max(b - a for a, b in zip(xs, xs[1:]))\n",
        level: 2,
        case: |r, l| {
            let n = 2 + r.below(2 + l as u64 * 2) as usize;
            let xs = ints(r, n, -100, 100);
            let m = xs.windows(2).map(|w| w[1] - w[0]).max().unwrap_or(0);
            (py_list(&xs), m.to_string())
        },
    },
    Tpl {
        name: "is_prime",
        desc: "returns True when the integer n is prime and False otherwise",
        solution: "def is_prime(n):\n    if n < 2:\n        return False\n    i = 2\n    while i * i <= n:\n        if n % i == 0:\n            return False\n        i += 1\n    return True\n",
        level: 2,
        case: |r, l| {
            let n = r.range(-3, 20 * l as i64 * l as i64 + 30);
            let p = n >= 2 && (2..).take_while(|i| i * i <= n).all(|i| n % i != 0);
            (n.to_string(), py_bool(p))
        },
    },
    Tpl {
        name: "reverse_words",
        desc: "returns the words of a sentence (separated by single spaces) in reverse order, joined by single spaces",
        solution: "def reverse_words(s):\n    return ' '.join(s.split(' ')[::-1])\n",
        level: 3,
        case: |r, l| {
            let k = 1 + r.below(2 + l as u64);
            let ws: Vec<String> = (0..k)
                .map(|_| {
                    let n = 1 + r.below(6) as usize;
                    word(r, n)
                })
                .collect();
            let rev: Vec<&str> = ws.iter().rev().map(String::as_str).collect();
            (py_str(&ws.join(" ")), py_str(&rev.join(" ")))
        },
    },
    Tpl {
        name: "fib",
        desc: "returns the n-th Fibonacci number, with fib(0) = 0 and fib(1) = 1",
        solution: "def fib(n):\n    a, b = 0, 1\n    for _ in range(n):\n        a, b = b, a + b\n    return a\n",
        level: 3,
        case: |r, l| {
            let n = r.below(5 + 8 * l as u64).min(90);
            let (mut a, mut b) = (0u128, 1u128);
            for _ in 0..n {
                (a, b) = (b, a + b);
            }
            (n.to_string(), a.to_string())
        },
    },
    Tpl {
        name: "running_max",
        desc: "returns a list whose i-th element is the maximum of the first i+1 elements of the input list",
        solution: "def running_max(xs):\n    out, m = [], None\n    for x in xs:\n        m = x if m is None or x > m else m\n        out.append(m)\n    return out\n",
        level: 4,
        case: |r, l| {
            let n = r.below(3 + l as u64 * 2) as usize;
            let xs = ints(r, n, -99, 99);
            let mut m = i64::MIN;
            let out: Vec<i64> = xs.iter().map(|&x| {
                m = m.max(x);
                m
            }).collect();
            (py_list(&xs), py_list(&out))
        },
    },
    Tpl {
        name: "second_largest",
        desc: "returns the second largest distinct value of a list of integers, or None when there is no such value",
        solution: "def second_largest(xs):\n    s = sorted(set(xs))\n    return s[-2] if len(s) >= 2 else None\n",
        level: 5,
        case: |r, l| {
            let n = r.below(2 + l as u64 * 2) as usize;
            let xs = ints(r, n, -9, 9);
            let mut s = xs.clone();
            s.sort_unstable();
            s.dedup();
            let v = if s.len() >= 2 { s[s.len() - 2].to_string() } else { "None".into() };
            (py_list(&xs), v)
        },
    },
    Tpl {
        name: "digit_root",
        desc: "returns the digital root of a non-negative integer: sum its decimal digits repeatedly until one digit remains",
        solution: "def digit_root(n):\n    while n >= 10:\n        n = sum(int(d) for d in str(n))\n    return n\n",
        level: 6,
        case: |r, l| {
            let n = r.below(10u64.pow(l.min(15)) + 1);
            let v = if n == 0 { 0 } else { 1 + (n - 1) % 9 };
            (n.to_string(), v.to_string())
        },
    },
];

pub fn generate(rng: &mut Rng, level: u32) -> Task {
    let level = level.clamp(1, MAX_LEVEL);
    let pool: Vec<&Tpl> = TEMPLATES.iter().filter(|t| t.level <= level).collect();
    let t = *rng.choose(&pool);
    let n_tests = 3 + (level as usize).min(5);
    let mut cases: Vec<(String, String)> = Vec::new();
    for _ in 0..n_tests * 4 {
        let c = (t.case)(rng, level);
        if !cases.iter().any(|x| x.0 == c.0) {
            cases.push(c);
        }
        if cases.len() > n_tests {
            break;
        }
    }
    let (ex_args, ex_out) = cases.remove(0);
    let tests: Vec<String> = cases.iter().map(|(a, e)| format!("assert {}({a}) == {e}", t.name)).collect();
    let prompt = format!(
        "Write a Python function `{}` that {}. Example: {}({ex_args}) == {ex_out}. Answer with the function in a ```python code block.",
        t.name, t.desc, t.name
    );
    let response = format!("```python\n{}```", t.solution);
    let mut meta = serde_json::Map::new();
    meta.insert("function".into(), json!(t.name));
    Task {
        prompt,
        label: json!({"tests": tests, "entry_point": t.name}),
        response,
        messages: None,
        metadata: meta,
        tools: vec![],
    }
}
