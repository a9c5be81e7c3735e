//! The shared decoder (`arl_model`) against Hugging Face `transformers`:
//! golden logits of tiny random Qwen2, Qwen3 and Llama 3 checkpoints
//! (made by `scripts/golden/make_tiny.py`), KV-cache inference against the
//! full forward, strict loading, and byte-identical save → load → save.
use arl_testkit::common;

use arl_model::{token_logprobs, weights, Model, SaveOptions};
use std::path::{Path, PathBuf};
use tch::{Device, Kind, Tensor};

fn golden(name: &str) -> PathBuf {
    Path::new(concat!(env!("CARGO_MANIFEST_DIR"), "/../..")).join("testdata/golden").join(name)
}

fn expected(dir: &Path) -> (Tensor, Tensor, Tensor) {
    let mut m: std::collections::HashMap<String, Tensor> =
        Tensor::read_safetensors(dir.join("expected.safetensors")).unwrap().into_iter().collect();
    (m.remove("input_ids").unwrap(), m.remove("attention_mask").unwrap(), m.remove("logits").unwrap())
}

fn max_abs_diff(a: &Tensor, b: &Tensor) -> f64 {
    (a - b).abs().max().double_value(&[])
}

#[test]
fn golden_logits_match_transformers() {
    tch::set_num_threads(1);
    for name in ["qwen2", "qwen3", "llama"] {
        let dir = golden(name);
        let model = Model::load(&dir, Device::Cpu, Kind::Float).unwrap();
        let (ids, mask, want) = expected(&dir);
        let got = tch::no_grad(|| model.forward(&ids, Some(&mask)));
        // Padded positions are not compared: HF and arl may treat them differently.
        let real = mask.unsqueeze(-1).to_kind(Kind::Float);
        let d = max_abs_diff(&(&got * &real), &(&want * &real));
        eprintln!("{name}: max |Δ logits| = {d:e}");
        assert!(d < 1e-4, "{name}: max |Δ| = {d}");
    }
}

#[test]
fn kv_cache_matches_full_forward() {
    // One intra-op thread: decode steps take `decode_attn`; two: SDPA over the cache.
    for (threads, name) in [1, 2].into_iter().flat_map(|t| ["qwen2", "qwen3", "llama"].map(move |n| (t, n))) {
        tch::set_num_threads(threads);
        let model = Model::load(&golden(name), Device::Cpu, Kind::Float).unwrap();
        let a: Vec<i64> = vec![5, 17, 3, 60, 2, 9, 44, 1, 8];
        let b: Vec<i64> = vec![7, 7, 30, 12];
        let full =
            |s: &[i64]| tch::no_grad(|| model.forward(&Tensor::from_slice(s).view([1, s.len() as i64]), None).get(0));
        let (fa, fb) = (full(&a), full(&b));
        // Prefill in two chunks, then decode both sequences together with
        // different cache lengths, in both slot orders (a view and a gather).
        let mut cache = model.new_cache();
        let (sa, sb) = (cache.alloc(), cache.alloc());
        let p1 = model.prefill(&mut cache, sa, &a[..3]);
        let p2 = model.prefill(&mut cache, sa, &a[3..6]);
        let pb = model.prefill(&mut cache, sb, &b[..2]);
        assert!(max_abs_diff(&p1, &fa.narrow(0, 0, 3)) < 1e-4);
        assert!(max_abs_diff(&p2, &fa.narrow(0, 3, 3)) < 1e-4);
        assert!(max_abs_diff(&pb, &fb.narrow(0, 0, 2)) < 1e-4);
        let out = model.decode_step(&mut cache, &[sa, sb], &[a[6], b[2]]);
        assert!(max_abs_diff(&out.get(0), &fa.get(6)) < 1e-4, "{name} a@6");
        assert!(max_abs_diff(&out.get(1), &fb.get(2)) < 1e-4, "{name} b@2");
        let out = model.decode_step(&mut cache, &[sb, sa], &[b[3], a[7]]);
        assert!(max_abs_diff(&out.get(1), &fa.get(7)) < 1e-4, "{name} a@7");
        assert!(max_abs_diff(&out.get(0), &fb.get(3)) < 1e-4, "{name} b@3");
        assert_eq!((cache.len(sa), cache.len(sb)), (8, 4));
        // Many slots: growing the cache keeps what the old slots hold.
        let extra: Vec<usize> = (0..20).map(|_| cache.alloc()).collect();
        for &s in &extra {
            let _ = model.prefill(&mut cache, s, &b[..1]);
        }
        cache.free(sb);
        assert_eq!(cache.active(), 21);
        // Truncate and re-run: the same logits as the first time.
        cache.truncate(sa, 5);
        let again = model.prefill(&mut cache, sa, &a[5..7]);
        assert!(max_abs_diff(&again, &fa.narrow(0, 5, 2)) < 1e-4);
        let out = model.decode_step(&mut cache, &[extra[3], sa], &[b[1], a[7]]);
        assert!(max_abs_diff(&out.get(0), &fb.get(1)) < 1e-4, "{name} b@1 in a late slot");
        assert!(max_abs_diff(&out.get(1), &fa.get(7)) < 1e-4, "{name} a@7 after truncate");
        // token_logprobs is log_softmax at the ids.
        let ids = Tensor::from_slice(&a[1..]);
        let lp = token_logprobs(&fa.narrow(0, 0, 8), &ids, 0.7);
        let want = (fa.narrow(0, 0, 8) / 0.7)
            .log_softmax(-1, Kind::Float)
            .gather(-1, &ids.unsqueeze(-1), false)
            .squeeze_dim(-1);
        assert!(max_abs_diff(&lp, &want) < 1e-6);
    }
}

#[test]
fn batched_extend_of_ragged_chunks_matches_full_forward() {
    tch::set_num_threads(1);
    for name in ["qwen2", "qwen3", "llama"] {
        let model = Model::load(&golden(name), Device::Cpu, Kind::Float).unwrap();
        let seqs: Vec<Vec<i64>> =
            vec![vec![5, 17, 3, 60, 2, 9, 44, 1, 8], vec![7, 7, 30, 12], vec![11, 4, 90, 33, 21, 6]];
        let full: Vec<Tensor> = seqs
            .iter()
            .map(|s| tch::no_grad(|| model.forward(&Tensor::from_slice(s).view([1, s.len() as i64]), None).get(0)))
            .collect();
        let mut cache = model.new_cache();
        // Slots out of order (a gather), the middle one already holding 2 tokens.
        let slots: Vec<usize> = (0..3).map(|_| cache.alloc()).collect();
        let order = [slots[2], slots[0], slots[1]];
        let _ = model.prefill(&mut cache, order[1], &seqs[1][..2]);
        // One batched prefill of chunks of 5, 2 and 6 tokens (padded to 6),
        // keeping different row ranges of each.
        let chunks: Vec<&[i64]> = vec![&seqs[0][..5], &seqs[1][2..4], &seqs[2][..]];
        let keep = [1..5, 1..2, 0..6];
        let out = model.extend(&mut cache, &order, &chunks, &keep);
        assert_eq!(out.size(), vec![4 + 1 + 6, model.config.vocab_size as i64]);
        assert!(max_abs_diff(&out.narrow(0, 0, 4), &full[0].narrow(0, 1, 4)) < 1e-4, "{name} seq 0");
        assert!(max_abs_diff(&out.narrow(0, 4, 1), &full[1].narrow(0, 3, 1)) < 1e-4, "{name} seq 1 after its cache");
        assert!(max_abs_diff(&out.narrow(0, 5, 6), &full[2]) < 1e-4, "{name} seq 2");
        assert_eq!((cache.len(order[0]), cache.len(order[1]), cache.len(order[2])), (5, 4, 6));
        // Then a ragged step: 3 more tokens for seq 0, one decode token for seq 2.
        let out = model.extend(&mut cache, &[order[0], order[2]], &[&seqs[0][5..8], &seqs[2][..1]], &[0..3, 0..1]);
        assert!(max_abs_diff(&out.narrow(0, 0, 3), &full[0].narrow(0, 5, 3)) < 1e-4, "{name} seq 0 second chunk");
        let again = tch::no_grad(|| {
            model.forward(&Tensor::from_slice(&[&seqs[2][..], &seqs[2][..1]].concat()).view([1, 7]), None).get(0)
        });
        assert!(max_abs_diff(&out.get(3), &again.get(6)) < 1e-4, "{name} seq 2 decode");
    }
}

/// arl-serve's fused q/k/v and gate/up matrices compute what the separate
/// projections do, and follow a reload (the projections are views of them).
#[test]
fn fused_projections_match_and_follow_reload() {
    tch::set_num_threads(1);
    let ids: Vec<i64> = vec![5, 17, 3, 60, 2, 9, 44, 1, 8];
    let logits = |m: &Model| {
        let mut cache = m.new_cache();
        let slot = cache.alloc();
        m.prefill(&mut cache, slot, &ids)
    };
    for name in ["qwen2", "qwen3", "llama"] {
        let plain = Model::load(&golden(name), Device::Cpu, Kind::Float).unwrap();
        let mut fused = Model::load(&golden(name), Device::Cpu, Kind::Float).unwrap();
        fused.fuse_projections();
        let d = max_abs_diff(&logits(&plain), &logits(&fused));
        assert!(d < 1e-5, "{name}: fused vs plain max |Δ| = {d}");
        // Other weights on disk: every parameter scaled, saved, reloaded in place.
        let t = common::tmpdir();
        tch::no_grad(|| {
            for (_, mut p) in plain.named_parameters() {
                let _ = p.g_mul_scalar_(0.75);
            }
        });
        plain.save(t.path(), &SaveOptions::default()).unwrap();
        fused.reload(t.path()).unwrap();
        let other = Model::load(t.path(), Device::Cpu, Kind::Float).unwrap();
        let (a, b) = (logits(&other), logits(&fused));
        assert!(
            max_abs_diff(&a, &logits(&Model::load(&golden(name), Device::Cpu, Kind::Float).unwrap())) > 1e-3,
            "{name}: the new weights differ"
        );
        let d = max_abs_diff(&a, &b);
        assert!(d < 1e-5, "{name}: after reload, fused vs freshly loaded max |Δ| = {d}");
    }
}

fn tensor_bytes(dir: &Path) -> Vec<(String, Vec<u8>)> {
    let mut all: Vec<(String, Vec<u8>)> = weights::read_all(dir)
        .unwrap()
        .into_iter()
        .map(|(k, t)| {
            let n = t.numel();
            let mut b = vec![0u8; n * t.kind().elt_size_in_bytes()];
            t.copy_data_u8(&mut b, n);
            (k, b)
        })
        .collect();
    all.sort();
    all
}

#[test]
fn save_load_save_is_byte_identical_and_sharded() {
    let tmp = common::tmpdir();
    let model = Model::load(&golden("qwen3"), Device::Cpu, Kind::Float).unwrap();
    // Small shards force the sharded layout with an index.
    let opts = SaveOptions { kind: Kind::Float, max_shard_bytes: 40_000 };
    let (a, b) = (tmp.path().join("a"), tmp.path().join("b"));
    std::fs::create_dir(&a).unwrap();
    std::fs::create_dir(&b).unwrap();
    model.save(&a, &opts).unwrap();
    assert!(a.join("model.safetensors.index.json").exists());
    assert!(weights::weight_files(&a).unwrap().len() > 1);
    let again = Model::load(&a, Device::Cpu, Kind::Float).unwrap();
    again.save(&b, &opts).unwrap();
    for f in weights::weight_files(&a).unwrap() {
        let name = f.file_name().unwrap();
        assert_eq!(std::fs::read(&f).unwrap(), std::fs::read(b.join(name)).unwrap(), "{name:?}");
    }
    assert_eq!(tensor_bytes(&a), tensor_bytes(&golden("qwen3")));
    // The written config carries the classic rope keys.
    let cfg: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(a.join("config.json")).unwrap()).unwrap();
    assert_eq!(cfg["rope_theta"], 1000000.0);
}

#[test]
fn strict_loading_names_tensor_and_shapes() {
    let tmp = common::tmpdir();
    let src = golden("llama");
    let mut tensors: std::collections::BTreeMap<String, Tensor> =
        weights::read_all(&src).unwrap().into_iter().collect();
    let dir = tmp.path().join("bad");
    std::fs::create_dir(&dir).unwrap();
    std::fs::copy(src.join("config.json"), dir.join("config.json")).unwrap();
    let ok = tensors.remove("model.norm.weight").unwrap();
    weights::write_sharded(&dir, &tensors, Kind::Float, u64::MAX).unwrap();
    let e = format!("{:#}", Model::load(&dir, Device::Cpu, Kind::Float).err().unwrap());
    assert!(e.contains("`model.norm.weight` is missing") && e.contains("[32]"), "{e}");
    tensors.insert("model.norm.weight".into(), ok.narrow(0, 0, 16));
    weights::write_sharded(&dir, &tensors, Kind::Float, u64::MAX).unwrap();
    let e = format!("{:#}", Model::load(&dir, Device::Cpu, Kind::Float).err().unwrap());
    assert!(e.contains("`model.norm.weight`") && e.contains("[16]") && e.contains("[32]"), "{e}");
    // A failed reload changes nothing.
    let mut m = Model::load(&src, Device::Cpu, Kind::Float).unwrap();
    let before = tensor_bytes(&src);
    assert!(m.reload(&dir).is_err());
    let out = tmp.path().join("out");
    std::fs::create_dir(&out).unwrap();
    m.save(&out, &SaveOptions::default()).unwrap();
    assert_eq!(tensor_bytes(&out), before);
    // A truncated file is refused from its header, before any tensor is read.
    tensors.insert("model.norm.weight".into(), ok);
    weights::write_sharded(&dir, &tensors, Kind::Float, u64::MAX).unwrap();
    let f = dir.join("model.safetensors");
    let len = std::fs::metadata(&f).unwrap().len();
    std::fs::OpenOptions::new().write(true).open(&f).unwrap().set_len(len - 100).unwrap();
    let e = format!("{:#}", m.reload(&dir).err().unwrap());
    assert!(e.contains("not a safetensors file") && e.contains("bytes"), "{e}");
    let out2 = tmp.path().join("out2");
    std::fs::create_dir(&out2).unwrap();
    m.save(&out2, &SaveOptions::default()).unwrap();
    assert_eq!(tensor_bytes(&out2), before);
}

/// Weights are read straight into the parameters; a checkpoint in another
/// dtype goes through a per-tensor conversion and loads the same values.
#[test]
fn bf16_checkpoint_loads_into_a_float32_model() {
    let tmp = common::tmpdir();
    let m = Model::load(&golden("qwen2"), Device::Cpu, Kind::Float).unwrap();
    let d = tmp.path().join("bf16");
    std::fs::create_dir(&d).unwrap();
    m.save(&d, &SaveOptions { kind: Kind::BFloat16, ..Default::default() }).unwrap();
    let back = Model::load(&d, Device::Cpu, Kind::Float).unwrap();
    let (a, b) = (m.named_parameters(), back.named_parameters());
    assert_eq!(a.len(), b.len());
    for (name, t) in &a {
        let want = t.to_kind(Kind::BFloat16).to_kind(Kind::Float);
        assert_eq!(b[name].kind(), Kind::Float);
        assert!(max_abs_diff(&want, &b[name]) == 0.0, "{name}");
    }
}

/// A decode step of more sequences than the kernel's rows runs natively in
/// parts, with the libtorch path's logits and cache.
#[test]
fn a_native_step_of_more_than_64_sequences_runs_in_parts() {
    use arl_model::DecodeMatmul;
    let mut model = Model::load(&golden("qwen2"), Device::Cpu, Kind::Float).unwrap();
    model.fuse_projections();
    model.set_decode_matmul(DecodeMatmul::Float32).unwrap();
    let run = |m: &Model| {
        let mut cache = m.new_cache();
        let slots: Vec<usize> = (0..70).map(|_| cache.alloc()).collect();
        for (i, &s) in slots.iter().enumerate() {
            let ids: Vec<i64> = (0..1 + i % 3).map(|j| (5 + 7 * i + j) as i64 % 60).collect();
            drop(m.prefill(&mut cache, s, &ids));
        }
        let last: Vec<i64> = (0..70).map(|i| (3 + i) as i64 % 60).collect();
        let a = m.decode_step(&mut cache, &slots, &last);
        let b = m.decode_step(&mut cache, &slots, &last);
        Tensor::cat(&[a, b], 0)
    };
    let native = run(&model);
    model.set_native_decode(false);
    let torch = run(&model);
    assert_eq!(native.size(), [140, torch.size()[1]]);
    let d = max_abs_diff(&native, &torch);
    assert!(d < 1e-5, "70 sequences, native in parts vs the libtorch path: {d}");
}

#[test]
fn decode_matmul_kernels_match_blas_and_follow_reload() {
    use arl_model::DecodeMatmul;
    // Decode steps of 1 and 3 sequences (the native step, `net::native`,
    // or the libtorch path with the kernel's products), prefills of 1 to 9
    // rows (the kernel's products), both threads settings (one part, and
    // the pool's), fused and separate projections.
    let run = |m: &Model| {
        let mut cache = m.new_cache();
        let (a, b, c) = (cache.alloc(), cache.alloc(), cache.alloc());
        let mut out = vec![m.prefill(&mut cache, a, &[5, 17, 3, 60, 2, 9, 44, 1, 8])];
        out.push(m.prefill(&mut cache, b, &[7, 7, 30]));
        out.push(m.prefill(&mut cache, c, &[11]));
        out.push(m.decode_step(&mut cache, &[a], &[4]));
        out.push(m.decode_step(&mut cache, &[a, b, c], &[6, 2, 13]));
        Tensor::cat(&out, 0)
    };
    for threads in [1, 2] {
        tch::set_num_threads(threads);
        for (name, fuse) in [("qwen2", true), ("qwen3", true), ("llama", true), ("qwen2", false), ("qwen3", false)] {
            let mut model = Model::load(&golden(name), Device::Cpu, Kind::Float).unwrap();
            if fuse {
                model.fuse_projections();
            }
            let blas = run(&model);
            model.set_decode_matmul(DecodeMatmul::Float32).unwrap();
            let d32 = max_abs_diff(&run(&model), &blas);
            model.set_native_decode(false);
            let d32_torch = max_abs_diff(&run(&model), &blas);
            let torch_rows = run(&model).narrow(0, 13, 4);
            model.set_native_decode(true);
            // The decode rows (13..17) of the two paths: same values up to the order of the sums.
            let dn = max_abs_diff(&run(&model).narrow(0, 13, 4), &torch_rows);
            assert!(dn < 1e-5, "{name}: native decode rows vs the libtorch path {dn}");
            model.set_decode_matmul(DecodeMatmul::Bf16).unwrap();
            let d16 = max_abs_diff(&run(&model), &blas);
            eprintln!(
                "{name} (fused {fuse}), {threads} threads: max |Δ logits| native float32 {d32:e}, \
                 libtorch path float32 {d32_torch:e}, native bf16 weights {d16:e}"
            );
            assert!(d32 < 1e-5, "{name}: native float32 step vs BLAS {d32}");
            assert!(d32_torch < 1e-5, "{name}: float32 kernel vs BLAS {d32_torch}");
            // bf16 weights move the logits by their rounding, and only so much.
            assert!(d16 > 1e-6 && d16 < 2e-2, "{name}: bf16 weights vs float32 {d16}");
            if !fuse {
                continue;
            }
            // New weights on disk: the bf16 copies follow a reload.
            let t = common::tmpdir();
            let other = Model::load(&golden(name), Device::Cpu, Kind::Float).unwrap();
            tch::no_grad(|| {
                for (_, mut p) in other.named_parameters() {
                    let _ = p.g_mul_scalar_(0.75);
                }
            });
            other.save(t.path(), &SaveOptions::default()).unwrap();
            model.reload(t.path()).unwrap();
            let mut fresh = Model::load(t.path(), Device::Cpu, Kind::Float).unwrap();
            fresh.fuse_projections();
            fresh.set_decode_matmul(DecodeMatmul::Bf16).unwrap();
            let d = max_abs_diff(&run(&model), &run(&fresh));
            assert!(d < 1e-5, "{name}: after reload, bf16 copies vs fresh ones {d}");
        }
    }
    // Not for other dtypes.
    let mut half = Model::load(&golden("qwen2"), Device::Cpu, Kind::BFloat16).unwrap();
    assert!(half.set_decode_matmul(DecodeMatmul::Bf16).is_err());
    assert!(half.set_decode_matmul(DecodeMatmul::Blas).is_ok());
}
