//! The chunked LM head (`Model::token_scores`, `Model::forward_backward_lean`)
//! against the plain path — full logits [B,T,V], `token_logprobs`, the
//! entropy formula, autograd through all of it: the same log-probs and
//! entropies, and the same gradients on every parameter, for several chunk
//! sizes, with and without skipped positions, checkpointed or not, padded
//! or packed (the rows concatenated without their padding), or grouped (a
//! shared prefix run once for its rows).
use arl_model::{token_logprobs, EntropyMode, HeadOptions, Layout, Model, PrefixRun};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use tch::{Device, Kind, Tensor};

fn golden(name: &str) -> PathBuf {
    Path::new(concat!(env!("CARGO_MANIFEST_DIR"), "/../..")).join("testdata/golden").join(name)
}

fn entropy(logits: &Tensor, t: f64) -> Tensor {
    let l = logits / t;
    let p = l.softmax(-1, Kind::Float);
    l.logsumexp([-1i64].as_slice(), false) - (p * &l).sum_dim_intlist([-1i64].as_slice(), false, Kind::Float)
}

/// A loss of the kind the trainer builds: a weighted sum of log-probs,
/// something nonlinear in them (a ratio), and an entropy bonus.
fn loss(lp: &Tensor, ent: Option<&Tensor>, w: &Tensor, mask: &Tensor) -> Tensor {
    let l = ((lp * w) + (lp.exp() * 0.3)) * mask;
    match ent {
        Some(e) => (l - e * mask * 0.05).sum(Kind::Float),
        None => l.sum(Kind::Float),
    }
}

fn grads(m: &Model) -> BTreeMap<String, Tensor> {
    m.named_parameters().into_iter().map(|(k, v)| (k, v.grad().copy())).collect()
}

fn max_rel(a: &Tensor, b: &Tensor) -> f64 {
    let scale = b.abs().max().double_value(&[]).max(1e-6);
    (a - b).abs().max().double_value(&[]) / scale
}

#[test]
fn chunked_scores_and_gradients_equal_the_full_logits_path() {
    tch::manual_seed(0);
    for name in ["qwen2", "llama"] {
        let dir = golden(name);
        let reference = Model::load(&dir, Device::Cpu, Kind::Float).unwrap();
        let v = reference.config.vocab_size as i64;
        let (b, t) = (3i64, 11i64);
        let ids = Tensor::randint(v, [b, t], (Kind::Int64, Device::Cpu));
        let temp = 0.8;
        // Response positions of different lengths (position p scores token p+1).
        let mut m = vec![0f32; (b * (t - 1)) as usize];
        for (i, (from, to)) in [(2usize, 10usize), (5, 7), (0, 4)].iter().enumerate() {
            m[i * (t as usize - 1) + from..i * (t as usize - 1) + to].iter_mut().for_each(|x| *x = 1.0);
        }
        let mask = Tensor::from_slice(&m).view([b, t - 1]);
        let w = Tensor::randn([b, t - 1], (Kind::Float, Device::Cpu));

        // The plain path.
        let logits = reference.forward(&ids, None).narrow(1, 0, t - 1);
        let lp_ref = token_logprobs(&logits, &ids.narrow(1, 1, t - 1), temp);
        let ent_ref = entropy(&logits, temp);
        loss(&lp_ref, Some(&ent_ref), &w, &mask).backward();
        let g_ref = grads(&reference);

        // Real lengths of the rows for the packed layout (the rest is padding,
        // which the causal plain path never lets a scored position see).
        let lens = [11usize, 8, 5];
        let cases = [
            (1usize, false, false, false),
            (4, true, false, false),
            (7, true, true, false),
            (0, false, true, false),
            (3, true, false, true),
            (0, true, true, true),
            (5, true, false, true),
        ];
        for (chunk, needed, checkpointed, packed) in cases {
            let model = Model::load(&dir, Device::Cpu, Kind::Float).unwrap();
            let o = HeadOptions { temperature: temp, chunk_tokens: chunk, entropy: EntropyMode::Grad };
            let sel = needed.then_some(&mask);
            let layout = if packed { Layout::Packed(&lens) } else { Layout::Padded };
            // Values without gradient.
            let s = model.token_scores(&ids, sel, layout, &o);
            let keep = if needed { mask.shallow_clone() } else { Tensor::ones_like(&mask) };
            let d_lp = max_rel(&(&s.logp * &keep), &(&lp_ref.detach() * &keep));
            let d_ent = max_rel(&(s.entropy.as_ref().unwrap() * &keep), &(&ent_ref.detach() * &keep));
            assert!(
                d_lp < 1e-5 && d_ent < 1e-5,
                "{name} chunk {chunk} packed {packed}: log-probs {d_lp:e}, entropy {d_ent:e}"
            );
            if needed {
                let outside = (&s.logp * (Tensor::ones_like(&mask) - &mask)).abs().max().double_value(&[]);
                assert_eq!(outside, 0.0, "positions not asked for read 0");
            }
            // Gradients.
            model
                .forward_backward_lean(&ids, sel, layout, &o, checkpointed, |sc| {
                    Ok(loss(&sc.logp, sc.entropy.as_ref(), &w, &mask))
                })
                .unwrap();
            let g = grads(&model);
            assert_eq!(g.len(), g_ref.len());
            for (k, want) in &g_ref {
                let d = max_rel(&g[k], want);
                assert!(
                    d < 1e-4,
                    "{name} chunk {chunk} needed {needed} checkpointed {checkpointed} packed {packed}: `{k}` differs by {d:e}"
                );
            }
        }
    }
}

/// With the entropy as a value only, it takes no part in the gradient.
#[test]
fn entropy_values_only_leave_the_gradient_to_the_log_probs() {
    tch::manual_seed(1);
    let dir = golden("qwen2");
    let a = Model::load(&dir, Device::Cpu, Kind::Float).unwrap();
    let b = Model::load(&dir, Device::Cpu, Kind::Float).unwrap();
    let v = a.config.vocab_size as i64;
    let ids = Tensor::randint(v, [2, 9], (Kind::Int64, Device::Cpu));
    let w = Tensor::randn([2, 8], (Kind::Float, Device::Cpu));
    let ones = Tensor::ones([2, 8], (Kind::Float, Device::Cpu));
    let value = HeadOptions { temperature: 1.0, chunk_tokens: 5, entropy: EntropyMode::Value };
    a.forward_backward_lean(&ids, None, Layout::Padded, &value, false, |s| {
        assert!(s.entropy.is_some(), "the entropy is computed");
        Ok(loss(&s.logp, s.entropy.as_ref(), &w, &ones))
    })
    .unwrap();
    let off = HeadOptions { entropy: EntropyMode::Off, ..value };
    b.forward_backward_lean(&ids, None, Layout::Padded, &off, false, |s| Ok(loss(&s.logp, None, &w, &ones))).unwrap();
    let (ga, gb) = (grads(&a), grads(&b));
    for (k, want) in &gb {
        assert!(max_rel(&ga[k], want) < 1e-6, "`{k}`");
    }
}

/// The hidden states (what a critic's value head reads) of packed rows equal
/// the padded rows' at every real position; padding reads 0.
#[test]
fn packed_features_equal_padded_ones() {
    tch::manual_seed(2);
    let model = Model::load(&golden("llama"), Device::Cpu, Kind::Float).unwrap();
    let v = model.config.vocab_size as i64;
    let lens = [9usize, 3, 6];
    let ids = Tensor::randint(v, [3, 9], (Kind::Int64, Device::Cpu));
    let (padded, packed) =
        tch::no_grad(|| (model.features_in(&ids, Layout::Padded), model.features_in(&ids, Layout::Packed(&lens))));
    for (i, &l) in lens.iter().enumerate() {
        let (a, b) = (packed.get(i as i64), padded.get(i as i64));
        let d = max_rel(&a.narrow(0, 0, l as i64), &b.narrow(0, 0, l as i64));
        assert!(d < 1e-5, "row {i}: {d:e}");
        if l < 9 {
            assert_eq!(a.narrow(0, l as i64, 9 - l as i64).abs().max().double_value(&[]), 0.0);
        }
    }
}

/// Rows [B, T] of three runs: rows 0-2 share 7 tokens (row 2 one more, its
/// run's prefix stays 7), rows 3-4 share 4, row 5 stands alone; right-padded.
fn grouped_rows(v: i64) -> (Tensor, Vec<usize>, Vec<PrefixRun>) {
    let lens = vec![11usize, 9, 12, 6, 8, 5];
    let t = 12;
    let r = Tensor::randint(v, [6, t], (Kind::Int64, Device::Cpu));
    let mut ids = Vec::<i64>::try_from(&r.view([-1])).unwrap();
    let t = t as usize;
    for (rows, p) in [(0..3, 7), (3..5, 4)] {
        let first = rows.start;
        for i in rows.skip(1) {
            for j in 0..p {
                ids[i * t + j] = ids[first * t + j];
            }
        }
    }
    ids[2 * t + 7] = ids[7]; // row 2 shares one more token with row 0
    for (i, &l) in lens.iter().enumerate() {
        ids[i * t + l..(i + 1) * t].iter_mut().for_each(|x| *x = 0);
    }
    let runs =
        vec![PrefixRun { rows: 3, prefix: 7 }, PrefixRun { rows: 2, prefix: 4 }, PrefixRun { rows: 1, prefix: 0 }];
    (Tensor::from_slice(&ids).view([6, t as i64]), lens, runs)
}

/// A group's prefix run once ([`Layout::Grouped`]) gives the packed rows'
/// log-probs, entropies, hidden states and the gradient of every parameter
/// (the prefix's from all its rows), scored everywhere or only on the
/// responses, checkpointed or not, in every family (GQA folds the mask).
#[test]
fn a_shared_prefix_run_once_equals_every_row_run_whole() {
    tch::manual_seed(4);
    for name in ["qwen2", "qwen3", "llama"] {
        let dir = golden(name);
        let base = Model::load(&dir, Device::Cpu, Kind::Float).unwrap();
        let (ids, lens, runs) = grouped_rows(base.config.vocab_size as i64);
        let t = ids.size()[1];
        // Responses from each run's prefix on (position p scores token p+1).
        let mut m = vec![0f32; 6 * (t as usize - 1)];
        let starts = [7usize, 7, 7, 4, 4, 3];
        for (i, (&s, &l)) in starts.iter().zip(&lens).enumerate() {
            m[i * (t as usize - 1) + s - 1..i * (t as usize - 1) + l - 1].iter_mut().for_each(|x| *x = 1.0);
        }
        let resp = Tensor::from_slice(&m).view([6, t - 1]);
        let w = Tensor::randn([6, t - 1], (Kind::Float, Device::Cpu));
        let o = HeadOptions { temperature: 0.7, chunk_tokens: 5, entropy: EntropyMode::Grad };
        let grouped = Layout::Grouped { lens: &lens, runs: &runs };
        for (needed, checkpointed) in [(false, false), (true, false), (true, true)] {
            let sel = needed.then_some(&resp);
            // Scored positions: real ones (every one, or the responses').
            let mut real = vec![0f32; 6 * (t as usize - 1)];
            for (i, &l) in lens.iter().enumerate() {
                real[i * (t as usize - 1)..i * (t as usize - 1) + l - 1].iter_mut().for_each(|x| *x = 1.0);
            }
            let keep = if needed { resp.shallow_clone() } else { Tensor::from_slice(&real).view([6, t - 1]) };
            let (a, b) = (
                Model::load(&dir, Device::Cpu, Kind::Float).unwrap(),
                Model::load(&dir, Device::Cpu, Kind::Float).unwrap(),
            );
            let (sa, sb) =
                (a.token_scores(&ids, sel, Layout::Packed(&lens), &o), b.token_scores(&ids, sel, grouped, &o));
            let d = max_rel(&(&sb.logp * &keep), &(&sa.logp * &keep));
            let de = max_rel(&(sb.entropy.unwrap() * &keep), &(sa.entropy.unwrap() * &keep));
            assert!(d < 1e-5 && de < 1e-5, "{name} needed {needed}: log-probs {d:e}, entropy {de:e}");
            let run = |m: &Model, layout| {
                m.forward_backward_lean(&ids, sel, layout, &o, checkpointed, |sc| {
                    Ok(loss(&sc.logp, sc.entropy.as_ref(), &w, &keep))
                })
                .unwrap();
                grads(m)
            };
            let (ga, gb) = (run(&a, Layout::Packed(&lens)), run(&b, grouped));
            for (k, want) in &ga {
                let d = max_rel(&gb[k], want);
                assert!(d < 1e-5, "{name} needed {needed} checkpointed {checkpointed}: `{k}` differs by {d:e}");
            }
        }
        let (fa, fb) =
            tch::no_grad(|| (base.features_in(&ids, Layout::Packed(&lens)), base.features_in(&ids, grouped)));
        assert!(max_rel(&fb, &fa) < 1e-5, "{name}: hidden states");
    }
}

/// A run whose rows do not all share its prefix is refused, not mis-scored.
#[test]
#[should_panic(expected = "shares its run's prefix")]
fn a_run_whose_rows_differ_in_the_prefix_is_refused() {
    let model = Model::load(&golden("qwen2"), Device::Cpu, Kind::Float).unwrap();
    let ids = Tensor::from_slice(&[1i64, 2, 3, 4, 1, 2, 9, 4]).view([2, 4]);
    let runs = [PrefixRun { rows: 2, prefix: 3 }];
    let o = HeadOptions { temperature: 1.0, chunk_tokens: 0, entropy: EntropyMode::Off };
    model.token_scores(&ids, None, Layout::Grouped { lens: &[4, 4], runs: &runs }, &o);
}
