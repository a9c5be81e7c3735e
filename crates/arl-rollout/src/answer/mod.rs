//! Reading SGLang's `/generate` answer (docs/reference/protocols.md §1): the
//! generated ids, their log-probs, the finish reason and the weight version.
//!
//! Two readers, one result. [`parse`] first tries a one-pass reader of an
//! answer in SGLang's shape (module `fast`): this runs for every turn of
//! every sample, and through serde the `[logprob, id, text]` triple of every
//! generated token was a quarter of `arl-rollout`'s instructions. Whatever
//! that reader does not know — a batch, a syntax error, an answer missing a
//! field, a value it would have to interpret beyond the plain cases — goes to
//! the serde reader, whose results and error messages are the reference. The
//! test `the_fast_reader_answers_as_serde_does` checks on generated and
//! corrupted answers that whenever the fast reader answers, serde answers the
//! same, bit for bit.
use anyhow::{anyhow, bail, Context, Result};
use serde_json::Value;

mod fast;
use fast::fast;

/// One generation call's answer.
#[derive(Debug, Clone)]
pub struct Generation {
    pub output_ids: Vec<u32>,
    pub logprobs: Vec<f32>,
    /// `stop`, `length`, `abort` (the type of `meta_info.finish_reason`).
    pub finish: String,
    pub weight_version: Option<String>,
}

/// Parses a `/generate` answer body (one object, or a list of one).
pub fn parse(body: &[u8]) -> Result<Generation> {
    match fast(body) {
        Some(g) => Ok(g),
        None => by_serde(body),
    }
}

/// The parts of a `/generate` answer that rollout reads, deserialised
/// directly (no `Value` tree).
#[derive(serde::Deserialize)]
struct Answer {
    #[serde(default)]
    output_ids: Option<Vec<u32>>,
    meta_info: Option<AnswerMeta>,
}

#[derive(serde::Deserialize)]
struct AnswerMeta {
    #[serde(default)]
    output_token_logprobs: Option<Vec<(Option<f64>, Option<u64>, serde::de::IgnoredAny)>>,
    #[serde(default)]
    finish_reason: Option<FinishReason>,
    #[serde(default)]
    weight_version: Option<Value>,
}

#[derive(serde::Deserialize)]
#[serde(untagged)]
enum FinishReason {
    Typed {
        #[serde(rename = "type")]
        kind: Option<String>,
    },
    Plain(String),
}

/// The reference reader, through serde.
fn by_serde(body: &[u8]) -> Result<Generation> {
    let first = body.iter().find(|b| !b.is_ascii_whitespace()).copied();
    let a: Answer = if first == Some(b'[') {
        let mut v: Vec<Answer> =
            serde_json::from_slice(body).context("the /generate answer is not the expected JSON")?;
        if v.len() != 1 {
            bail!("/generate answered {} results for one prompt", v.len());
        }
        v.pop().expect("one")
    } else {
        serde_json::from_slice(body).context("the /generate answer is not the expected JSON")?
    };
    let meta = a.meta_info.ok_or_else(|| anyhow!("/generate answer without `meta_info`"))?;
    let lps = meta.output_token_logprobs.ok_or_else(|| {
        anyhow!("/generate answer without `meta_info.output_token_logprobs` (return_logprob ignored?)")
    })?;
    let mut logprobs = Vec::with_capacity(lps.len());
    let mut lp_ids = Vec::with_capacity(lps.len());
    for (i, (lp, id, _)) in lps.into_iter().enumerate() {
        let id = id.ok_or_else(|| anyhow!("`output_token_logprobs` entry {i} without a token id"))?;
        logprobs.push(lp.unwrap_or(0.0) as f32);
        lp_ids.push(id as u32);
    }
    let output_ids = a.output_ids.unwrap_or_else(|| lp_ids.clone());
    if output_ids != lp_ids {
        bail!(
            "`output_ids` ({} tokens) and `output_token_logprobs` ({} entries) disagree",
            output_ids.len(),
            lp_ids.len()
        );
    }
    let finish = match meta.finish_reason {
        Some(FinishReason::Typed { kind }) => kind.unwrap_or_else(|| "unknown".to_string()),
        Some(FinishReason::Plain(s)) => s,
        None => "unknown".to_string(),
    };
    let weight_version = match meta.weight_version {
        Some(Value::String(s)) => Some(s),
        Some(Value::Number(n)) => Some(n.to_string()),
        _ => None,
    };
    Ok(Generation { output_ids, logprobs, finish, weight_version })
}

#[cfg(test)]
mod tests {
    use super::*;
    use arl_core::rng::Rng;

    fn same(a: &Generation, b: &Generation) -> bool {
        let bits = |v: &[f32]| v.iter().map(|f| f.to_bits()).collect::<Vec<_>>();
        a.output_ids == b.output_ids
            && bits(&a.logprobs) == bits(&b.logprobs)
            && a.finish == b.finish
            && a.weight_version == b.weight_version
    }

    /// An answer in SGLang's shape with random values, spacing and extra fields.
    fn answer(rng: &mut Rng) -> String {
        let pick = |rng: &mut Rng, l: &[&'static str]| l[rng.below(l.len() as u64) as usize];
        let sp = |rng: &mut Rng| pick(rng, &["", "", " ", "\n  ", "\t"]);
        let floats = [
            "-0.125",
            "-0.0",
            "0.0",
            "-1e-3",
            "-2.5E+2",
            "-0.30000000000000004",
            "-7.006492321624085e-46",
            "-1234567.875",
            "-3.4028235e38",
            "-1e-320",
            "-12.000000000000001",
            "-0.1000000000000000055511151231257827",
        ];
        let thirds = [
            "null",
            "\"a\"",
            "\"\\\"<|im_end|>\\\\\"",
            "\"\\u00e9 x\"",
            "\"é\"",
            "3",
            "[1, {\"k\": []}]",
            "{}",
            "true",
        ];
        let extras = [
            "\"text\": \"hello \\\"world\\\"\\n\"",
            "\"id\": \"abc\"",
            "\"prompt_tokens\": 40",
            "\"cached_tokens\": 0",
            "\"e2e_latency\": 0.0123",
            "\"spec\": {\"a\": [1, 2.5, null, false]}",
            "\"hidden_states\": []",
        ];
        let n = rng.below(7) as usize;
        let mut ids = Vec::new();
        let mut triples = Vec::new();
        for i in 0..n {
            let id = if i == 0 && rng.below(5) == 0 { u32::MAX } else { rng.below(200_000) as u32 };
            ids.push(id.to_string());
            // Log-probs as servers write them (shortest forms of f32 and f64 values), and odd ones.
            let x = -(rng.below(1 << 40) as f64 / (1u64 << rng.below(60)) as f64);
            let lp = match rng.below(8) {
                0 => "null".to_string(),
                1 | 2 => pick(rng, &floats).to_string(),
                3 => format!("{:?}", x as f32 as f64),
                4 => format!("{:e}", x),
                5 => format!("{:.3}", x),
                _ => format!("{:?}", x),
            };
            let (a, b, c, d) = (sp(rng), sp(rng), sp(rng), sp(rng));
            triples.push(format!("[{a}{lp},{b}{id},{c}{}{d}]", pick(rng, &thirds)));
        }
        let finish = pick(
            rng,
            &[
                "{\"type\": \"stop\", \"matched\": 258}",
                "{\"type\": \"length\", \"length\": 64}",
                "{\"type\": \"abort\", \"message\": \"x\"}",
                "{\"type\": null}",
                "{}",
                "\"stop\"",
                "null",
                "{\"matched\": \"</s>\", \"type\": \"st\\u006fp\"}",
            ],
        );
        let version = pick(rng, &["\"1\"", "\"v-2\"", "3", "0", "null", "true"]);
        let mut meta = vec![format!("\"output_token_logprobs\": [{}]", triples.join(&format!(",{}", sp(rng))))];
        if rng.below(6) > 0 {
            meta.push(format!("\"finish_reason\":{}{finish}", sp(rng)));
        }
        if rng.below(6) > 0 {
            meta.push(format!("\"weight_version\": {version}"));
        }
        for _ in 0..rng.below(3) {
            meta.push(pick(rng, &extras).to_string());
        }
        shuffle(rng, &mut meta);
        let mut top = vec![format!("\"meta_info\":{}{{{}}}", sp(rng), meta.join(", "))];
        if rng.below(4) > 0 {
            top.push(format!("\"output_ids\": [{}]", ids.join(", ")));
        }
        for _ in 0..rng.below(3) {
            top.push(pick(rng, &extras).to_string());
        }
        shuffle(rng, &mut top);
        format!("{}{{{}}}{}", sp(rng), top.join(&format!(",{}", sp(rng))), sp(rng))
    }

    fn shuffle(rng: &mut Rng, v: &mut [String]) {
        for i in (1..v.len()).rev() {
            v.swap(i, rng.below(i as u64 + 1) as usize);
        }
    }

    #[test]
    fn the_fast_reader_answers_as_serde_does() {
        let mut rng = Rng::new(11);
        let (mut fast_read, mut corrupted_fast) = (0, 0);
        for case in 0..3000 {
            let text = answer(&mut rng);
            let reference = by_serde(text.as_bytes()).unwrap_or_else(|e| panic!("serde rejects {text}: {e:#}"));
            // Every generated answer is in the plain shape the fast reader takes.
            let f = fast(text.as_bytes()).unwrap_or_else(|| panic!("the fast reader left this to serde: {text}"));
            assert!(same(&f, &reference), "{text}");
            fast_read += 1;
            // Corrupted: cut short, a byte changed, a byte inserted. Whenever the
            // fast reader answers, serde answers the same.
            let mut bad = text.clone().into_bytes();
            let at = rng.below(bad.len() as u64) as usize;
            match case % 3 {
                0 => bad.truncate(at),
                1 => bad[at] = b"\"\\,:[]{}0-.eE nlx\x01\xff"[rng.below(18) as usize],
                _ => bad.insert(at, b"\"\\,:[]{}0-.eE nlx\x01\xff"[rng.below(18) as usize]),
            }
            if let Some(f) = fast(&bad) {
                corrupted_fast += 1;
                let s = by_serde(&bad).unwrap_or_else(|e| {
                    panic!("the fast reader accepted what serde rejects ({e:#}): {}", String::from_utf8_lossy(&bad))
                });
                assert!(same(&f, &s), "{}", String::from_utf8_lossy(&bad));
            }
        }
        assert_eq!(fast_read, 3000);
        // Some corruptions still leave a valid answer (a changed digit, a space).
        assert!(corrupted_fast > 100, "{corrupted_fast}");
    }

    #[test]
    fn shapes_left_to_serde_and_its_errors() {
        let cases: &[(&str, Option<&str>)] = &[
            (r#"[{"meta_info": {"output_token_logprobs": [[-1.0, 9, null]]}}]"#, None),
            (r#"{"meta_info": {"output_token_logprobs": [[-1, 9, null]]}}"#, None),
            (r#"{"meta_info": {"output_token_logprobs": [[-0.5, 3]]}}"#, Some("not the expected JSON")),
            (r#"{"meta_info": {"output_token_logprobs": [[-0.5, 3, null, 1]]}}"#, Some("not the expected JSON")),
            (r#"{"meta_info": {"output_token_logprobs": [[-0.5, null, null]]}}"#, Some("without a token id")),
            (r#"{"meta_info": {"output_token_logprobs": [[-0.5, 4294967296, null]]}}"#, None),
            (r#"{"meta_info": {"output_token_logprobs": [[1e400, 3, null]]}}"#, Some("not the expected JSON")),
            (r#"{"output_ids": [5], "meta_info": {"output_token_logprobs": [[-0.5, 6, null]]}}"#, Some("disagree")),
            (r#"{"output_ids": [-5], "meta_info": {"output_token_logprobs": []}}"#, Some("not the expected JSON")),
            (r#"{"meta_info": {}}"#, Some("return_logprob")),
            (r#"{"meta_info": {"output_token_logprobs": null}}"#, Some("return_logprob")),
            (r#"{"meta_info": null}"#, Some("without `meta_info`")),
            (r#"{"output_ids": []}"#, Some("without `meta_info`")),
            (r#"{"meta_info": {"output_token_logprobs": [], "finish_reason": 3}}"#, Some("not the expected JSON")),
            (r#"{"meta_info": {"output_token_logprobs": [], "weight_version": -2.5}}"#, None),
            (r#"{"meta_info": {"output_token_logprobs": [], "weight_version": [1]}}"#, None),
            (
                r#"{"meta_info": {"output_token_logprobs": [], "output_token_logprobs": []}}"#,
                Some("not the expected JSON"),
            ),
            (r#"{"meta_info": {"output_token_logprobs": []}} x"#, Some("not the expected JSON")),
            (r#"{"meta_info": {"output_token_logprobs": [[-0.5, 6"#, Some("not the expected JSON")),
        ];
        for (text, err) in cases {
            assert!(fast(text.as_bytes()).is_none(), "the fast reader took {text}");
            match (by_serde(text.as_bytes()), err) {
                (Ok(_), None) => {}
                (Err(e), Some(want)) => assert!(format!("{e:#}").contains(want), "{text}: {e:#}"),
                (got, _) => panic!("{text}: {:?}", got.map(|g| g.output_ids)),
            }
        }
        // Not UTF-8 where serde reads text (a key, the finish reason's values), and where it does not.
        for (text, serde_ok) in [
            (&b"{\"meta_info\": {\"output_token_logprobs\": [], \"finish_reason\": {\"type\": \"stop\", \"matched\": \"\xff\"}}}"[..], false),
            (b"{\"meta_info\": {\"output_token_logprobs\": [], \"x\xff\": 1}}", false),
            (b"{\"meta_info\": {\"output_token_logprobs\": [], \"weight_version\": \"\xff\"}}", false),
        ] {
            assert!(fast(text).is_none(), "{}", String::from_utf8_lossy(text));
            assert_eq!(by_serde(text).is_ok(), serde_ok, "{}", String::from_utf8_lossy(text));
        }
        let text = b"{\"text\": \"\xff\", \"meta_info\": {\"output_token_logprobs\": [[-0.5, 1, \"\xfe\"]]}}";
        assert!(same(&fast(text).expect("read"), &by_serde(text).expect("read")));
        // Cut short is a syntax error, which `generate` retries.
        let e = parse(br#"{"meta_info": {"output_token_logprobs": [[-0.5, 6"#).unwrap_err();
        assert!(e.downcast_ref::<serde_json::Error>().is_some_and(|j| j.is_eof() || j.is_syntax()));
        let g = parse(br#"{"text": "hi", "output_ids": [5, 6], "meta_info": {"id": "x", "finish_reason": {"type": "stop", "matched": 6}, "weight_version": 3, "output_token_logprobs": [[-0.5, 5, null], [null, 6, "b"]]}}"#).expect("parses");
        assert_eq!(
            (g.output_ids, g.logprobs, g.finish.as_str(), g.weight_version.as_deref()),
            (vec![5, 6], vec![-0.5, 0.0], "stop", Some("3"))
        );
    }
}
