//! The math grader's text handling: `normalize`, `answer_line`, `boxed_all`,
//! `strip_end_marker` on any text, and `grade(response, label)` on the input
//! split at its first NUL byte (no NUL: the whole input is the response and
//! its last line the label).
#![no_main]
use arl_math::{answer_line, boxed_all, grade, normalize, strip_end_marker, MathOpts};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let text = String::from_utf8_lossy(data);
    let (response, label) = match text.split_once('\0') {
        Some((r, l)) => (r, l),
        None => (&*text, text.rsplit('\n').next().unwrap_or("")),
    };
    let _ = normalize(response);
    let _ = answer_line(response);
    for b in boxed_all(response) {
        let _ = normalize(b);
    }
    let _ = strip_end_marker(response);
    let v = grade(response, label, &MathOpts::default());
    let _ = v.correct;
    let v = grade(response, label, &MathOpts { tolerance: 1e-6, ..MathOpts::default() });
    let _ = v.correct;
});
