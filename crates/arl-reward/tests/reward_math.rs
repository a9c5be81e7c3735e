//! The `math` grader, both ways: equal forms that must match and near misses
//! (and hedges) that must not. Each answer form is tried in three extraction
//! styles (`\boxed{}` alone, `\boxed{}` in a sentence, an `Answer:` line),
//! except where the form itself decides the style.
use arl_math::{grade, MathOpts};

/// (label, answers that must score 1)
const EQUAL: &[(&str, &[&str])] = &[
    (
        "\\frac{1}{2}",
        &[
            "\\frac{1}{2}",
            "\\dfrac{1}{2}",
            "\\tfrac{1}{2}",
            "\\frac12",
            "1/2",
            "0.5",
            "0.50",
            ".5",
            "\\left(\\frac{1}{2}\\right)",
            "2/4",
            "\\frac{2}{4}",
            "50/100",
        ],
    ),
    ("0.5", &["\\frac{1}{2}", "1/2", "0.500"]),
    (
        "12",
        &[
            "12",
            "12.0",
            "12.00",
            "+12",
            "12 cm",
            "12\\text{ cm}",
            "12 \\text{cm}",
            "\\text{12}",
            "12 units",
            "12 square units",
            "x = 12",
            "x=12",
            "n = 12",
            "12.",
            "\\mathbf{12}",
            "12\\,\\text{m}",
            "12 \\mbox{ meters}",
            "24/2",
            "3 \\cdot 4",
            "3 \\times 4",
            "{12}",
            "12cm",
        ],
    ),
    ("90", &["90^\\circ", "90^{\\circ}", "90°", "90 degrees", "90\\circ", "90.0"]),
    ("1000", &["1,000", "1000", "1{,}000", "10^3", "10^{3}", "1000.0"]),
    ("1000000", &["1,000,000", "10^6", "1000000"]),
    ("50", &["50\\%", "50%", "50 percent", "\\$50", "$50", "50 dollars", "\\$50.00"]),
    ("-3", &["-3", "−3", "-3.0", "x = -3", "\\left(-3\\right)", "-\\frac{6}{2}"]),
    ("\\frac{5}{6}", &["\\frac{5}{6}", "\\dfrac{5}{6}", "5/6", "\\frac{10}{12}", "\\left(\\dfrac{5}{6}\\right)"]),
    ("-\\frac{3}{4}", &["-\\frac{3}{4}", "\\frac{-3}{4}", "-3/4", "-0.75", "\\frac{3}{-4}"]),
    ("2\\sqrt{3}", &["2\\sqrt{3}", "2 \\sqrt{3}", "\\sqrt{12}", "2\\sqrt3", "\\sqrt{3} \\cdot 2"]),
    ("\\sqrt{2}/2", &["\\frac{\\sqrt{2}}{2}", "\\frac{1}{\\sqrt{2}}", "\\dfrac{\\sqrt2}{2}"]),
    ("3\\pi", &["3\\pi", "3 \\pi", "\\pi \\cdot 3", "\\frac{6\\pi}{2}"]),
    ("2x+1", &["2x+1", "1+2x", "2 x + 1", "x + x + 1", "\\left(2x+1\\right)"]),
    ("x^2-1", &["(x-1)(x+1)", "x^2 - 1", "(x+1)(x-1)", "-1+x^{2}"]),
    ("(1,2)", &["(1,2)", "(1, 2)", "\\left(1, 2\\right)", "(1,\\ 2)", "(\\frac{2}{2}, 2)"]),
    ("1, 2, 3", &["1, 2, 3", "3, 2, 1", "2,1,3", "1,2,3"]),
    ("4", &["4", "\\boxed{4}", "4.0", "8/2", "2^2", "\\sqrt{16}", "\\text{4}", "4 apples", "x=4"]),
    ("0", &["0", "0.0", "-0", "0/5"]),
    ("2.5", &["2.5", "5/2", "\\frac{5}{2}", "2.50", "\\dfrac52"]),
    ("Yes", &["Yes", "yes", "\\text{Yes}", "YES"]),
    ("10063", &["10063", "10,063", "347 \\cdot 29", "10063.0"]),
    ("7", &["7", "7 hours", "7 \\text{ hours}", "7\\ \\text{days}", "y = 7"]),
    ("3.14", &["3.14", "3.140", "314/100"]),
    ("\\frac{\\pi}{4}", &["\\frac{\\pi}{4}", "\\pi/4", "0.25\\pi", "\\dfrac{\\pi}{4}"]),
];

/// (label, answers that must score 0)
const NEAR: &[(&str, &[&str])] = &[
    ("\\frac{1}{3}", &["0.333", "0.33", "\\frac{1}{4}", "3", "\\frac{3}{1}", "1/33", "0.3333333"]),
    (
        "12",
        &[
            "13",
            "11.99",
            "120",
            "1.2",
            "12.5",
            "-12",
            "21",
            "12 or 13",
            "12, 13",
            "11 to 13",
            "between 11 and 13",
            "11-13",
            "12 \\pm 1",
        ],
    ),
    ("90", &["91", "90.5", "\\frac{\\pi}{2}", "45", "9"]),
    ("1000", &["100", "10000", "1,0000", "10^4", "999"]),
    ("-3", &["3", "\\pm 3", "-3 or 3", "3, -3", "-2", "\\frac{-3}{2}"]),
    ("\\frac{5}{6}", &["\\frac{6}{5}", "0.83", "0.833", "5/7", "\\frac{5}{6} or \\frac{1}{6}"]),
    ("2\\sqrt{3}", &["3.46", "3.4641", "2\\sqrt{2}", "\\sqrt{6}", "4\\sqrt{3}"]),
    ("3\\pi", &["9.42", "3", "\\pi", "3\\pi^2", "9.424777"]),
    ("2x+1", &["2x-1", "2y+1", "x+1", "2x", "2x+1 or 2x"]),
    ("x^2-1", &["x^2+1", "(x-1)^2", "x^2", "x-1"]),
    ("(1,2)", &["(2,1)", "(1,3)", "(1,2,3)", "1"]),
    ("1, 2, 3", &["1, 2", "1, 2, 4", "1, 2, 3, 4", "6"]),
    (
        "4",
        &[
            "4 or 5",
            "3 < x < 5",
            "3 \\le x \\le 5",
            "4, 5",
            "40",
            "0.4",
            "4^2",
            "\\sqrt{4}",
            "3-5",
            "3 to 5",
            "between 3 and 5",
        ],
    ),
    ("0", &["1", "0.1", "-1", "0 or 1"]),
    ("2.5", &["2.4", "2.55", "25", "2", "3"]),
    ("Yes", &["No", "Yes or No", "Maybe"]),
    ("10063", &["10062", "10064", "10036", "1006", "100630"]),
    ("7", &["7 or 8", "6, 7, 8", "70", "7.01", "6"]),
];

fn wrap(form: &str) -> Vec<String> {
    vec![
        format!("\\boxed{{{form}}}"),
        format!("Let me work it out. So the result is $\\boxed{{{form}}}$."),
        format!("Working...\nAnswer: {form}"),
    ]
}

#[test]
fn at_least_200_cases_both_ways() {
    let opts = MathOpts::default();
    let mut n_eq = 0;
    let mut n_near = 0;
    let mut failures = Vec::new();
    for (label, forms) in EQUAL {
        for f in *forms {
            for resp in wrap(f) {
                n_eq += 1;
                let v = grade(&resp, label, &opts);
                if !v.correct {
                    failures.push(format!("should MATCH: {resp:?} vs {label:?}: {:?}", v));
                }
            }
        }
    }
    for (label, forms) in NEAR {
        for f in *forms {
            for resp in wrap(f) {
                n_near += 1;
                let v = grade(&resp, label, &opts);
                if v.correct {
                    failures.push(format!("should NOT match: {resp:?} vs {label:?}: {:?}", v));
                }
            }
        }
    }
    assert!(n_eq >= 200 && n_near >= 200, "{n_eq} equal, {n_near} near-miss cases");
    assert!(failures.is_empty(), "{} failures of {}:\n{}", failures.len(), n_eq + n_near, failures.join("\n"));
}

#[test]
fn hedges_are_named_in_the_detail() {
    let o = MathOpts::default();
    let cases = [
        ("\\boxed{3} or maybe \\boxed{4}", "4", "several_boxed"),
        ("\\boxed{3 \\text{ or } 4}", "4", "or"),
        ("\\boxed{3, 4}", "4", "several_candidates"),
        ("\\boxed{3 \\le x \\le 5}", "4", "range"),
        ("\\boxed{3-5}", "4", "range"),
        ("Answer: from 3 to 5", "4", "range"),
        ("\\boxed{\\pm 4}", "4", "plus_minus"),
    ];
    for (r, l, why) in cases {
        let v = grade(r, l, &o);
        assert!(!v.correct);
        assert_eq!(v.hedge, Some(why), "{r}: {v:?}");
        assert_eq!(v.to_json()["hedge"], why);
    }
    // The same answer boxed twice is not a hedge.
    assert!(grade("\\boxed{4} ... so again \\boxed{4}", "4", &o).correct);
    // A label that is itself a range or a ± is matched, not refused.
    assert!(grade("\\boxed{\\pm 2}", "\\pm 2", &o).correct);
}

#[test]
fn last_box_wins_nested_braces_and_tolerance() {
    let o = MathOpts::default();
    assert!(grade("\\boxed{\\frac{\\sqrt{3}}{2}}", "\\frac{\\sqrt3}{2}", &o).correct);
    assert!(grade("first try \\boxed{{{4}}}", "4", &o).correct);
    assert!(!grade("no final answer", "4", &o).correct);
    assert!(!grade("\\boxed{0.333}", "1/3", &o).correct);
    assert!(grade("\\boxed{0.333}", "1/3", &MathOpts { tolerance: 1e-2, ..MathOpts::default() }).correct);
    let v = grade("Answer: 12 cm", "12", &o);
    assert_eq!(v.source, Some("answer_line"));
    assert_eq!(v.normalized.as_deref(), Some("12"));
}
