//! The `code` reward: run the response's last fenced code block against the
//! label's tests in the sandbox; reward = fraction of tests passed.
//!
//! Label shapes (docs/DESIGN.md §3):
//! - `{"tests": ["assert f(2) == 4", …], "setup": "import math"?, "test_setup": "…"?}`
//!   — `setup` runs before the solution, `test_setup` after it (MBPP's
//!   `test_setup_code`, which builds inputs from the solution's classes);
//!   each assert runs after them in one interpreter, each with its own time limit;
//!   after a test times out the rest are not run (a hung solution would only
//!   burn more time) and count as failed.
//! - `{"test": "def check(candidate): …", "entry_point": "f", "prompt": "def f(x):\n …"?}`
//!   (HumanEval) — one test; when the code does not define the entry point
//!   (a completion of the body alone), the label's `prompt` runs before it;
//!   when it does, the prompt's import lines do.
//! - `{"cases": [{"stdin": …, "stdout": …}, …], "language": "python"|"cpp"?}` —
//!   one sandbox run per case, compared line by line with trailing spaces ignored
//!   (verl compares `stdout.rstrip("\n")`).
//!
//! The harness reports per-test verdicts on a line tagged with a per-run
//! random nonce and deletes its own file first, so a solution cannot easily
//! forge results by printing; a deliberately adversarial program that
//! inspects the interpreter's frames could, which is why `sys.exit`/`os._exit`
//! at import still scores 0 (no verdict lines).
use crate::score::{Score, ScoreError};
use arl_env::sandbox::{Language, Limits, Outcome, Request, Sandbox};
use serde_json::{json, Value};
use std::time::Duration;

#[derive(Debug, Clone)]
pub struct CodeOpts {
    /// Time limit of one test (assert tests) or one case (stdin/stdout).
    pub test_timeout: Duration,
    pub memory_mb: u64,
}

impl Default for CodeOpts {
    fn default() -> Self {
        CodeOpts { test_timeout: Duration::from_secs(5), memory_mb: 1024 }
    }
}

/// The last fenced code block (```lang … ```), else `None`.
pub fn extract_code(resp: &str) -> Option<(Option<&str>, &str)> {
    let mut last = None;
    let mut rest = resp;
    let mut base = 0;
    while let Some(p) = rest.find("```") {
        let after = &rest[p + 3..];
        let nl = after.find('\n')?;
        let lang = after[..nl].trim();
        let body = &after[nl + 1..];
        let Some(end) = body.find("```") else { break };
        last = Some((
            if lang.is_empty() { None } else { Some(&resp[base + p + 3..base + p + 3 + lang.len()]) },
            &body[..end],
        ));
        let consumed = p + 3 + nl + 1 + end + 3;
        base += consumed;
        rest = &rest[consumed..];
    }
    last.map(|(l, b)| (l.map(str::trim), b))
}

const HARNESS: &str = r#"
import os, sys, json, signal, traceback
try:
    os.unlink(__file__)
except OSError:
    pass
_arl_out = os.fdopen(os.dup(1), "w")
_NONCE = "@@NONCE@@"
_TESTS = json.loads(@@TESTS@@)
_SRC = json.loads(@@SRC@@)
_SETUP = json.loads(@@SETUP@@)
_AFTER = json.loads(@@AFTER@@)
_T = @@TIMEOUT@@
class _ArlTimeout(BaseException):
    pass
def _alarm(s, f):
    raise _ArlTimeout()
signal.signal(signal.SIGALRM, _alarm)
def _emit(i, ok, why):
    _arl_out.write(_NONCE + json.dumps([i, ok, why]) + "\n"); _arl_out.flush()
def _short(e):
    s = "".join(traceback.format_exception_only(type(e), e)).strip()
    return s[-300:]
g = {"__name__": "__main__"}
try:
    signal.setitimer(signal.ITIMER_REAL, _T)
    exec(compile(_SETUP + "\n" + _SRC + "\n" + _AFTER, "solution.py", "exec"), g)
    signal.setitimer(signal.ITIMER_REAL, 0)
except _ArlTimeout:
    for i in range(len(_TESTS)):
        _emit(i, False, "timeout: the solution did not finish loading")
    sys.exit(0)
except BaseException as e:
    signal.setitimer(signal.ITIMER_REAL, 0)
    for i in range(len(_TESTS)):
        _emit(i, False, "crash: " + _short(e))
    sys.exit(0)
hung = False
for i, t in enumerate(_TESTS):
    if hung:
        _emit(i, False, "not run: an earlier test timed out"); continue
    try:
        signal.setitimer(signal.ITIMER_REAL, _T)
        exec(compile(t, "test_%d" % i, "exec"), g)
        signal.setitimer(signal.ITIMER_REAL, 0)
        _emit(i, True, "passed")
    except _ArlTimeout:
        hung = True
        _emit(i, False, "timeout")
    except AssertionError as e:
        signal.setitimer(signal.ITIMER_REAL, 0)
        _emit(i, False, "wrong: assertion failed" + ((": " + str(e)[:200]) if str(e) else ""))
    except MemoryError:
        signal.setitimer(signal.ITIMER_REAL, 0)
        _emit(i, False, "memory")
    except BaseException as e:
        signal.setitimer(signal.ITIMER_REAL, 0)
        _emit(i, False, "error: " + _short(e))
"#;

fn nonce() -> String {
    let mut s =
        std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map(|d| d.as_nanos() as u64).unwrap_or(0);
    s ^= (std::process::id() as u64) << 32;
    static CTR: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
    let c = CTR.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let a = arl_core::rng::mix(&[s, c]);
    let b = arl_core::rng::mix(&[a, c, 17]);
    format!("ARL{a:016x}{b:016x}:")
}

fn py_str_literal(v: &Value) -> String {
    // A JSON text inside a Python string literal: json.dumps of the JSON text.
    serde_json::to_string(&serde_json::to_string(v).unwrap_or_default()).unwrap_or_default()
}

fn str_list(v: &Value) -> Option<Vec<String>> {
    match v {
        Value::String(s) => Some(vec![s.clone()]),
        Value::Array(a) => a.iter().map(|x| x.as_str().map(str::to_string)).collect(),
        _ => None,
    }
}

/// One test's verdict.
struct Verdict {
    ok: bool,
    why: String,
}

fn run_asserts(
    o: &CodeOpts,
    sb: &Sandbox,
    src: &str,
    tests: &[String],
    (setup, after): (&str, &str),
) -> Result<(Vec<Verdict>, Value), ScoreError> {
    let n = nonce();
    let code = HARNESS
        .replace("@@NONCE@@", &n)
        .replace("@@TESTS@@", &py_str_literal(&json!(tests)))
        .replace("@@SRC@@", &py_str_literal(&json!(src)))
        .replace("@@SETUP@@", &py_str_literal(&json!(setup)))
        .replace("@@AFTER@@", &py_str_literal(&json!(after)))
        .replace("@@TIMEOUT@@", &format!("{:.3}", o.test_timeout.as_secs_f64()));
    let total = o.test_timeout * (tests.len() as u32 + 1) + Duration::from_secs(2);
    let limits = Limits { timeout: total, memory_mb: o.memory_mb, max_output: 1 << 20, ..sb.limits().clone() };
    let res = sb.run(&Request::python(code).with_limits(limits)).map_err(|e| ScoreError(format!("sandbox: {e:#}")))?;
    let mut got: Vec<Option<Verdict>> = (0..tests.len()).map(|_| None).collect();
    for line in res.stdout.lines() {
        if let Some(j) = line.strip_prefix(n.as_str()) {
            if let Ok(Value::Array(a)) = serde_json::from_str::<Value>(j) {
                if let (Some(i), Some(ok), Some(why)) = (a[0].as_u64(), a[1].as_bool(), a[2].as_str()) {
                    if let Some(slot) = got.get_mut(i as usize) {
                        *slot = Some(Verdict { ok, why: why.to_string() });
                    }
                }
            }
        }
    }
    let fallback = match res.outcome {
        Outcome::Timeout => "timeout".to_string(),
        Outcome::Memory => "memory".to_string(),
        Outcome::Ok | Outcome::OutputTruncated => "no verdict: the program exited before the tests ran".to_string(),
        other => format!("{other}: {}", last_line(&res.stderr)),
    };
    let verdicts = got.into_iter().map(|v| v.unwrap_or_else(|| Verdict { ok: false, why: fallback.clone() })).collect();
    let run = json!({"outcome": res.outcome.as_str(), "wall_s": (res.wall_s * 1000.0).round() / 1000.0, "stderr": arl_env::sandbox::cut_middle(&res.stderr, 2000)});
    Ok((verdicts, run))
}

fn last_line(s: &str) -> String {
    s.trim_end().lines().last().unwrap_or("").chars().take(300).collect()
}

fn squash_out(s: &str) -> String {
    let mut lines: Vec<&str> = s.lines().map(str::trim_end).collect();
    while lines.last().is_some_and(|l| l.is_empty()) {
        lines.pop();
    }
    lines.join("\n")
}

fn run_cases(
    o: &CodeOpts,
    sb: &Sandbox,
    src: &str,
    lang: Language,
    cases: &[Value],
) -> Result<Vec<Verdict>, ScoreError> {
    let limits = Limits { timeout: o.test_timeout, memory_mb: o.memory_mb, ..sb.limits().clone() };
    let results: Vec<Result<Verdict, ScoreError>> = std::thread::scope(|s| {
        let hs: Vec<_> = cases
            .iter()
            .map(|c| {
                let limits = limits.clone();
                s.spawn(move || {
                    let stdin = c.get("stdin").or_else(|| c.get("input")).and_then(Value::as_str).unwrap_or("");
                    let want = c
                        .get("stdout")
                        .or_else(|| c.get("output"))
                        .and_then(Value::as_str)
                        .ok_or_else(|| ScoreError("field `label`: a case has no `stdout` string".into()))?;
                    let r = sb
                        .run(&Request::new(lang, src).with_stdin(stdin).with_limits(limits))
                        .map_err(|e| ScoreError(format!("sandbox: {e:#}")))?;
                    Ok(match r.outcome {
                        Outcome::Ok if squash_out(&r.stdout) == squash_out(want) => {
                            Verdict { ok: true, why: "passed".into() }
                        }
                        Outcome::Ok => Verdict {
                            ok: false,
                            why: format!(
                                "wrong: expected `{}`, got `{}`",
                                arl_env::sandbox::cut_middle(want.trim(), 100),
                                arl_env::sandbox::cut_middle(r.stdout.trim(), 100)
                            ),
                        },
                        Outcome::Error => Verdict { ok: false, why: format!("error: {}", last_line(&r.stderr)) },
                        Outcome::CompileError => {
                            Verdict { ok: false, why: format!("compile_error: {}", last_line(&r.stderr)) }
                        }
                        other => Verdict { ok: false, why: other.as_str().to_string() },
                    })
                })
            })
            .collect();
        hs.into_iter().map(|h| h.join().unwrap_or_else(|_| Err(ScoreError("case runner panicked".into())))).collect()
    });
    results.into_iter().collect()
}

/// Scores a response against a code label.
pub fn score(o: &CodeOpts, sb: &Sandbox, resp: &str, label: &Value) -> Result<Score, ScoreError> {
    let Some((lang_tag, src)) = extract_code(resp) else {
        return Ok(Score {
            reward: 0.0,
            detail: json!({"extracted": null, "passed": 0, "total": null, "reason": "no fenced code block in the response"}),
            explain: "no fenced code block (```…```) found".into(),
        });
    };
    let obj = label
        .as_object()
        .ok_or_else(|| ScoreError("field `label`: expected {\"tests\": [...]} or {\"cases\": [...]}".into()))?;
    let mut prepended = false;
    let (verdicts, run) = if let Some(t) = obj.get("tests") {
        let tests = str_list(t).ok_or_else(|| ScoreError("field `label`: `tests` must be a list of strings".into()))?;
        let setup = obj.get("setup").and_then(Value::as_str).unwrap_or("");
        let after = obj.get("test_setup").and_then(Value::as_str).unwrap_or("");
        run_asserts(o, sb, src, &tests, (setup, after))?
    } else if let (Some(t), Some(ep)) =
        (obj.get("test").and_then(Value::as_str), obj.get("entry_point").and_then(Value::as_str))
    {
        // HumanEval's protocol: a completion that does not define the entry
        // point (a body alone) runs after the label's `prompt`.
        let defines = regex::Regex::new(&format!(r"(?m)^\s*(async\s+)?def\s+{}\s*\(", regex::escape(ep)))
            .is_ok_and(|re| re.is_match(src));
        // A complete function gets the prompt's imports (`from typing import
        // List`), which a model rewriting the signature tends to drop.
        let prompt = obj.get("prompt").and_then(Value::as_str);
        let full = match prompt {
            Some(p) if !defines => {
                prepended = true;
                format!("{p}{src}")
            }
            Some(p) => {
                let imports: String = p
                    .lines()
                    .filter(|l| l.starts_with("import ") || (l.starts_with("from ") && l.contains(" import ")))
                    .map(|l| format!("{l}\n"))
                    .collect();
                format!("{imports}{src}")
            }
            None => src.to_string(),
        };
        run_asserts(o, sb, &full, &[format!("{t}\ncheck({ep})")], ("", ""))?
    } else if let Some(Value::Array(cases)) = obj.get("cases") {
        let lang = obj
            .get("language")
            .and_then(Value::as_str)
            .or(lang_tag)
            .map(|l| {
                Language::parse(l).ok_or_else(|| {
                    ScoreError(format!("field `label`: language `{l}` is not supported (python, cpp, bash)"))
                })
            })
            .transpose()?
            .unwrap_or(Language::Python);
        (run_cases(o, sb, src, lang, cases)?, Value::Null)
    } else {
        return Err(ScoreError(
            "field `label`: expected {\"tests\": [...]}, {\"test\", \"entry_point\"} or {\"cases\": [...]}".into(),
        ));
    };
    let total = verdicts.len();
    let passed = verdicts.iter().filter(|v| v.ok).count();
    let reward = if total == 0 { 0.0 } else { passed as f32 / total as f32 };
    let first_fail = verdicts.iter().find(|v| !v.ok).map(|v| v.why.clone());
    let mut detail = json!({
        "passed": passed,
        "total": total,
        "tests": verdicts.iter().map(|v| json!({"ok": v.ok, "why": v.why})).collect::<Vec<_>>(),
        "code_chars": src.len(),
    });
    if let Some(f) = &first_fail {
        detail["reason"] = json!(f);
    }
    if prepended {
        detail["prompt_prepended"] = json!(true);
    }
    if !run.is_null() {
        detail["run"] = run;
    }
    detail["sandbox"] = sb.report().clone();
    let explain = match &first_fail {
        None => format!("{passed}/{total} tests passed"),
        Some(f) => format!("{passed}/{total} tests passed; first failure: {f}"),
    };
    Ok(Score { reward, detail, explain })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn last_fenced_block() {
        let r = "x\n```python\ndef f(): pass\n```\ntext\n```\nprint(1)\n```\n";
        assert_eq!(extract_code(r), Some((None, "print(1)\n")));
        assert_eq!(extract_code("```py\na=1\n```"), Some((Some("py"), "a=1\n")));
        assert_eq!(extract_code("no code"), None);
    }
}
