//! The `cmd` reward: any program that reads records as JSONL on stdin and
//! writes one answer line per record (`0.5` or `{"reward": …, "detail": …}`),
//! in order. With `by_group`, each stdin line is a JSON array holding one
//! whole group (records sharing `prompt_id`, in input order) and each answer
//! line is a JSON array of one answer per member — for rewards that compare
//! the samples of one prompt.
//!
//! The program is started once for all records (`sh -c COMMAND`); stdin is
//! fed from a thread so a program that reads everything before answering
//! does not deadlock.
use crate::remote::parse_answer;
use crate::score::{Score, ScoreError};
use anyhow::{anyhow, bail, Context, Result};
use arl_core::record::Record;
use serde_json::Value;
use std::io::{BufRead, BufReader, Write};
use std::process::{Command, Stdio};

#[derive(Debug, Clone)]
pub struct CmdRm {
    pub command: String,
    pub by_group: bool,
}

/// Groups by `prompt_id`, in order of first appearance; indices into `recs`.
pub fn groups(recs: &[Record]) -> Result<Vec<Vec<usize>>, String> {
    let mut idx: std::collections::HashMap<&str, usize> = std::collections::HashMap::new();
    let mut out: Vec<Vec<usize>> = Vec::new();
    for (i, r) in recs.iter().enumerate() {
        let id = r
            .prompt_id
            .as_deref()
            .ok_or_else(|| format!("record {}: field `prompt_id`: missing; `--by-group` groups by it", i + 1))?;
        match idx.get(id) {
            Some(&g) => out[g].push(i),
            None => {
                idx.insert(id, out.len());
                out.push(vec![i]);
            }
        }
    }
    Ok(out)
}

/// Scores every record with the external program. The outer `Err` is a
/// failure of the program itself (did not start, too few answers); an inner
/// `Err` is one bad answer.
pub fn score_all(c: &CmdRm, recs: &[Record]) -> Result<Vec<Result<Score, ScoreError>>> {
    let lines: Vec<Vec<u8>>;
    let sizes: Vec<usize>;
    let order: Vec<usize>;
    if c.by_group {
        let gs = groups(recs).map_err(arl_core::cli::data)?;
        let mut ls = Vec::with_capacity(gs.len());
        for g in &gs {
            let mut buf = b"[".to_vec();
            for (k, &i) in g.iter().enumerate() {
                if k > 0 {
                    buf.push(b',');
                }
                recs[i].to_json_vec(&mut buf);
            }
            buf.extend_from_slice(b"]\n");
            ls.push(buf);
        }
        sizes = gs.iter().map(Vec::len).collect();
        order = gs.into_iter().flatten().collect();
        lines = ls;
    } else {
        lines = recs
            .iter()
            .map(|r| {
                let mut b = Vec::new();
                r.to_json_vec(&mut b);
                b.push(b'\n');
                b
            })
            .collect();
        sizes = vec![1; recs.len()];
        order = (0..recs.len()).collect();
    }
    let mut child = Command::new("sh")
        .arg("-c")
        .arg(&c.command)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .with_context(|| format!("starting reward command `{}`", c.command))?;
    let mut stdin = child.stdin.take().ok_or_else(|| anyhow!("no stdin pipe"))?;
    let writer = std::thread::spawn(move || -> std::io::Result<()> {
        for l in lines {
            stdin.write_all(&l)?;
        }
        Ok(())
    });
    let stdout = child.stdout.take().ok_or_else(|| anyhow!("no stdout pipe"))?;
    let mut answers = BufReader::new(stdout).lines();
    let mut flat: Vec<Result<Score, ScoreError>> = Vec::with_capacity(recs.len());
    for (gi, &n) in sizes.iter().enumerate() {
        let line = match answers.next() {
            Some(l) => l.context("reading the reward command's output")?,
            None => {
                let _ = child.kill();
                let st = child.wait()?;
                bail!(
                    "reward command `{}` gave {gi} answer lines for {} {} ({st})",
                    c.command,
                    sizes.len(),
                    if c.by_group { "groups" } else { "records" }
                );
            }
        };
        let v: Result<Value, _> = serde_json::from_str(line.trim());
        match (c.by_group, v) {
            (_, Err(e)) => flat.extend((0..n).map(|_| {
                Err(ScoreError(format!(
                    "reward command answered `{}`: not JSON ({e})",
                    arl_env::sandbox::cut_middle(&line, 200)
                )))
            })),
            (false, Ok(v)) => flat.push(parse_answer(&v).map_err(|m| ScoreError(format!("reward command: {m}")))),
            (true, Ok(Value::Array(a))) if a.len() == n => {
                flat.extend(a.iter().map(|x| parse_answer(x).map_err(|m| ScoreError(format!("reward command: {m}")))))
            }
            (true, Ok(_)) => flat.extend((0..n).map(|_| {
                Err(ScoreError(format!("reward command: expected a JSON array of {n} answers for the group")))
            })),
        }
    }
    let _ = writer.join();
    let st = child.wait()?;
    if !st.success() {
        bail!("reward command `{}` exited with {st}", c.command);
    }
    // Back to input order.
    let mut out: Vec<Option<Result<Score, ScoreError>>> = (0..recs.len()).map(|_| None).collect();
    for (res, &i) in flat.into_iter().zip(&order) {
        out[i] = Some(res);
    }
    Ok(out.into_iter().map(|x| x.unwrap_or_else(|| Err(ScoreError("no answer".into())))).collect())
}
