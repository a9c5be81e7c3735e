//! The cached forward of inference (`arl-serve`): a [`KvCache`] for the
//! model, prefill, decode steps, and the batched [`Model::extend_with`]
//! both are made of.
use super::attention::Attention;
use super::cache::KvCache;
use super::linear::Sel;
use super::Model;
use crate::decode_attn::decode_attention;
use tch::{Device, Kind, Tensor};

impl Model {
    /// An empty cache for this model (slots are claimed with [`KvCache::alloc`]).
    pub fn new_cache(&self) -> KvCache {
        let n = self.layers.len();
        let (nkv, hd) = (self.config.kv_heads() as i64, self.config.head_dim() as i64);
        let empty = || Tensor::zeros([0, nkv, 0, hd], (self.kind(), self.device));
        KvCache {
            k: (0..n).map(|_| empty()).collect(),
            v: (0..n).map(|_| empty()).collect(),
            rope: None,
            rope_len: 0,
            lens: vec![],
            used: vec![],
            nkv,
            hd,
            kind: self.kind(),
            device: self.device,
        }
    }

    /// Runs `ids` after what `slot` of `cache` holds, for one sequence; returns
    /// logits [len(ids), V] (float32) and appends to the slot.
    pub fn prefill(&self, cache: &mut KvCache, slot: usize, ids: &[i64]) -> Tensor {
        // One sequence: a list of one range, as `extend` takes one per sequence.
        #[allow(clippy::single_range_in_vec_init)]
        self.extend(cache, &[slot], &[ids], &[0..ids.len()])
    }

    /// One decode step for several sequences at once: `last[i]` is the newest
    /// token of the sequence in `slots[i]`. Slots may differ in length (masked).
    /// Returns logits [B, V] (float32) and appends to each slot.
    pub fn decode_step(&self, cache: &mut KvCache, slots: &[usize], last: &[i64]) -> Tensor {
        assert_eq!(slots.len(), last.len(), "one token per slot");
        let chunks: Vec<&[i64]> = last.iter().map(std::slice::from_ref).collect();
        let keep = vec![0..1; last.len()];
        self.extend(cache, slots, &chunks, &keep)
    }

    /// One batched forward of several sequences through the cache: chunk `i`
    /// runs after what `slots[i]` holds (its own length), all chunks padded on
    /// the right to the longest and masked per row, so a batched prefill and a
    /// decode step (chunks of one token) are the same code. Appends every
    /// chunk to its slot and returns the logits (float32) of rows `keep[i]` of
    /// each chunk, concatenated: [Σ len(keep[i]), V]. Only those rows go
    /// through the LM head.
    pub fn extend(
        &self,
        cache: &mut KvCache,
        slots: &[usize],
        chunks: &[&[i64]],
        keep: &[std::ops::Range<usize>],
    ) -> Tensor {
        self.extend_with(cache, slots, chunks, keep, &[])
    }

    /// [`Model::extend`] with a served adapter per sequence: `lora[i]` (an id
    /// from [`Model::load_adapter`]) for chunk i; `None`, or `lora` empty:
    /// the base (with the attached adapter, if any). Sequences of different
    /// adapters and of the base run in the same batch: each adapter's term is
    /// computed for its own rows only.
    pub fn extend_with(
        &self,
        cache: &mut KvCache,
        slots: &[usize],
        chunks: &[&[i64]],
        keep: &[std::ops::Range<usize>],
        lora: &[Option<u32>],
    ) -> Tensor {
        assert!(
            !slots.is_empty() && slots.len() == chunks.len() && chunks.len() == keep.len(),
            "one chunk and one row range per slot"
        );
        assert!(lora.is_empty() || lora.len() == slots.len(), "one adapter (or none) per slot");
        let (groups, whole) = self.adapter_rows(lora, slots.len());
        let sel = match whole {
            Some(id) => Sel::All { id, dropout: 0.0 },
            None if groups.is_empty() => self.train_sel(false),
            None => Sel::Rows(&groups),
        };
        let decode = chunks.iter().all(|c| c.len() == 1) && keep.iter().all(|r| *r == (0..1));
        let last: Vec<i64> = chunks.iter().map(|c| c[0]).collect();
        let in_vocab = last.iter().all(|&t| t >= 0 && (t as usize) < self.config.vocab_size);
        if decode && in_vocab && groups.is_empty() && whole.is_none() && self.native_ok() {
            // More sequences than the kernel's rows: steps of even parts (the
            // sequences are independent), their logits in order.
            let parts = slots.len().div_ceil(crate::gemv::MAX_ROWS as usize);
            let per = slots.len().div_ceil(parts);
            let logits: Vec<Tensor> = slots
                .chunks(per)
                .zip(last.chunks(per))
                .map(|(s, l)| self.decode_native(cache, s, l).expect("ids checked in the vocabulary"))
                .collect();
            return if logits.len() == 1 {
                logits.into_iter().next().expect("one part")
            } else {
                Tensor::cat(&logits, 0)
            };
        }
        tch::no_grad(|| {
            let dev = self.device;
            let c = Chunks::new(cache, slots, chunks);
            cache.reserve(c.lmax as usize);
            let ids = Tensor::from_slice(&c.ids).to_device(dev).view([c.b, c.nmax]);
            let mut x = self.embed(&ids);
            let pos_t = Tensor::from_slice(&c.pos).to_device(dev).view([c.b, c.nmax]);
            let (cos, sin) = self.rope_at(cache, &c, &pos_t, x.kind());
            // Row i, query j (absolute p0_i + j) sees keys 0..=p0_i + j. A padded
            // query sees keys nobody wrote; its output is never read. Additive
            // (0 / −inf, what SDPA makes of a boolean mask), made once per call
            // in the GQA-folded layout `Attention::attend` wants: [B,1,rep·T,L].
            // A decode step on the CPU in float32 takes `decode_attn` instead,
            // which reads each sequence's own length and needs no mask (libtorch's
            // flash attention, built for long query blocks, was slower at one query
            // row per sequence, with one thread or several).
            let fast = c.nmax == 1 && dev == Device::Cpu && cache.kind == Kind::Float;
            let lens_after: Vec<usize> = c.p0.iter().map(|&p| p as usize + 1).collect();
            let mask = (!fast).then(|| {
                let rep = self.config.num_attention_heads as i64 / cache.nkv;
                c.mask(&pos_t, rep, x.kind(), dev)
            });
            let io = CacheIo::new(&c, slots, cache, mask, lens_after, dev);
            for (l, layer) in self.layers.iter().enumerate() {
                let (kc, vc) = (&mut cache.k[l], &mut cache.v[l]);
                x = layer.forward(&x, &cos, &sin, sel, |attn, q, k, v| io.attend(attn, q, k, v, kc, vc));
            }
            for (&s, &n) in slots.iter().zip(&c.ns) {
                cache.lens[s] += n as usize;
            }
            // Only the kept rows go through the final norm and the LM head.
            self.head(&c.kept_rows(&x, keep, dev))
        })
    }

    /// Seconds of one decode step of `rows` sequences of a few tokens each,
    /// the best of `steps` steps after a warm-up one, in a scratch cache: what
    /// the load-time choice of [`Model::set_decode_matmul`] measures.
    pub fn decode_step_seconds(&self, rows: usize, steps: usize) -> f64 {
        let mut cache = self.new_cache();
        let slots: Vec<usize> = (0..rows).map(|_| cache.alloc()).collect();
        let prompt: Vec<i64> = (1..=8).map(|t| t % self.config.vocab_size as i64).collect();
        for &s in &slots {
            drop(self.prefill(&mut cache, s, &prompt));
        }
        let last = vec![prompt[0]; rows];
        drop(self.decode_step(&mut cache, &slots, &last));
        (0..steps.max(1))
            .map(|_| {
                let t0 = std::time::Instant::now();
                drop(self.decode_step(&mut cache, &slots, &last));
                t0.elapsed().as_secs_f64()
            })
            .fold(f64::INFINITY, f64::min)
    }

    /// RoPE cos and signed sin at the chunks' positions `pos_t` [B, T], as
    /// [B,T,1,hd] (broadcasts over heads), from the cache's table (grown
    /// first when too short).
    fn rope_at(&self, cache: &mut KvCache, c: &Chunks, pos_t: &Tensor, kind: Kind) -> (Tensor, Tensor) {
        let need = c.pos.iter().max().map_or(1, |&p| p as usize + 1);
        let (cos, sin) = self.rope_table(cache, need, kind);
        let at = |t: &Tensor| t.index_select(0, &pos_t.view([-1])).view([c.b, c.nmax, 1, -1]);
        (at(&cos), at(&sin))
    }

    /// The cache's RoPE table, cos and signed sin [n, hd] for positions
    /// 0..n, n ≥ `need` (grown first when too short).
    pub(super) fn rope_table(&self, cache: &mut KvCache, need: usize, kind: Kind) -> (Tensor, Tensor) {
        if cache.rope_len < need {
            let n = need.max(2 * cache.rope_len).max(64);
            cache.rope = Some(self.rope(&Tensor::arange(n as i64, (Kind::Int64, self.device)), kind));
            cache.rope_len = n;
        }
        let (cos, sin) = cache.rope.as_ref().expect("rope table");
        (cos.shallow_clone(), sin.shallow_clone())
    }
}

/// The chunks of one [`Model::extend_with`] call, each after what its slot
/// holds, padded on the right to the longest: [B, T].
struct Chunks {
    b: i64,
    /// Each chunk's length, and the longest (T).
    ns: Vec<i64>,
    nmax: i64,
    /// Each slot's length before the call, and the longest after it (L).
    p0: Vec<i64>,
    lmax: i64,
    /// Chunks of different lengths (padding between the rows).
    ragged: bool,
    /// Token ids (padding 0) and absolute positions, [B·T].
    ids: Vec<i64>,
    pos: Vec<i64>,
}

impl Chunks {
    fn new(cache: &KvCache, slots: &[usize], chunks: &[&[i64]]) -> Chunks {
        let b = slots.len() as i64;
        let ns: Vec<i64> = chunks.iter().map(|c| c.len() as i64).collect();
        let nmax = *ns.iter().max().unwrap_or(&1);
        assert!(nmax > 0, "empty chunk");
        let p0: Vec<i64> = slots.iter().map(|&s| cache.lens[s] as i64).collect();
        let lmax = p0.iter().zip(&ns).map(|(p, n)| p + n).max().unwrap_or(1);
        let ragged = ns.iter().any(|&n| n != nmax);
        let mut ids = Vec::with_capacity((b * nmax) as usize);
        let mut pos = Vec::with_capacity((b * nmax) as usize);
        for (c, &p) in chunks.iter().zip(&p0) {
            ids.extend_from_slice(c);
            ids.resize(pos.len() + nmax as usize, 0);
            pos.extend((0..nmax).map(|j| p + j));
        }
        Chunks { b, ns, nmax, p0, lmax, ragged, ids, pos }
    }

    /// The additive causal mask over the cache (see [`Model::extend_with`]),
    /// GQA-folded: [B,1,rep·T,L].
    fn mask(&self, pos_t: &Tensor, rep: i64, kind: Kind, dev: Device) -> Tensor {
        let (b, nmax, lmax) = (self.b, self.nmax, self.lmax);
        let allowed = Tensor::arange(lmax, (Kind::Int64, dev)).view([1, 1, lmax]).le_tensor(&pos_t.unsqueeze(-1));
        let allowed = allowed.unsqueeze(1).expand([b, rep, nmax, lmax], false).reshape([b, 1, rep * nmax, lmax]);
        Tensor::zeros([b, 1, rep * nmax, lmax], (kind, dev)).masked_fill(&allowed.logical_not(), f64::NEG_INFINITY)
    }

    /// Rows `keep[i]` of each chunk of `x` [B, T, H]: [Σ len(keep[i]), H].
    fn kept_rows(&self, x: &Tensor, keep: &[std::ops::Range<usize>], dev: Device) -> Tensor {
        let nmax = self.nmax;
        let all_rows = keep.iter().zip(&self.ns).all(|(r, &n)| r.start == 0 && r.end as i64 == n) && !self.ragged;
        let h = x.reshape([self.b * nmax, -1]);
        if all_rows {
            return h;
        }
        let idx: Vec<i64> =
            keep.iter().enumerate().flat_map(|(i, r)| r.clone().map(move |j| i as i64 * nmax + j as i64)).collect();
        h.index_select(0, &Tensor::from_slice(&idx).to_device(dev))
    }
}

/// How one [`Model::extend_with`] call writes its keys and values into the
/// cache and reads the cache back, the same for every layer.
struct CacheIo<'a> {
    slots: &'a [usize],
    b: i64,
    nmax: i64,
    lmax: i64,
    nkv: i64,
    hd: i64,
    /// Where each real token's key goes: (slot, ·, position).
    w_idx: [Option<Tensor>; 3],
    /// Each real token's row in [B·T] (ragged chunks only: else all rows).
    w_row: Option<Tensor>,
    /// Consecutive slots (from `first`) are read as a view; others are gathered.
    slot_t: Tensor,
    first: i64,
    consecutive: bool,
    /// The mask ([`Chunks::mask`]); `None`: the CPU decode kernel, which
    /// reads each slot's length after the call, `lens_after`.
    mask: Option<Tensor>,
    lens_after: Vec<usize>,
}

impl<'a> CacheIo<'a> {
    fn new(
        c: &Chunks,
        slots: &'a [usize],
        cache: &KvCache,
        mask: Option<Tensor>,
        lens_after: Vec<usize>,
        dev: Device,
    ) -> CacheIo<'a> {
        // Where each real token's key goes: (slot, position), and its row in [B*T].
        let (mut w_slot, mut w_pos, mut w_row) = (Vec::new(), Vec::new(), Vec::new());
        for (i, (&s, (&p, &n))) in slots.iter().zip(c.p0.iter().zip(&c.ns)).enumerate() {
            for j in 0..n {
                w_slot.push(s as i64);
                w_pos.push(p + j);
                w_row.push(i as i64 * c.nmax + j);
            }
        }
        let w_idx =
            [Some(Tensor::from_slice(&w_slot).to_device(dev)), None, Some(Tensor::from_slice(&w_pos).to_device(dev))];
        let w_row = c.ragged.then(|| Tensor::from_slice(&w_row).to_device(dev));
        let slot_ids: Vec<i64> = slots.iter().map(|&s| s as i64).collect();
        let slot_t = Tensor::from_slice(&slot_ids).to_device(dev);
        // Consecutive slots are read as a view; others are gathered.
        let first = slot_ids[0];
        let consecutive = slot_ids.iter().enumerate().all(|(i, &s)| s == first + i as i64);
        CacheIo {
            slots,
            b: c.b,
            nmax: c.nmax,
            lmax: c.lmax,
            nkv: cache.nkv,
            hd: cache.hd,
            w_idx,
            w_row,
            slot_t,
            first,
            consecutive,
            mask,
            lens_after,
        }
    }

    /// One layer's attention through its cache `kc`, `vc`: stores this
    /// step's k, v [B,T,nkv,hd] (one row [nkv,hd] per real token), then
    /// attends q [B,T,nh,hd] over each slot's keys → [B,T,nh·hd].
    fn attend(&self, attn: &Attention, q: Tensor, k: Tensor, v: Tensor, kc: &mut Tensor, vc: &mut Tensor) -> Tensor {
        let (b, nmax, lmax) = (self.b, self.nmax, self.lmax);
        // k, v [B,T,nkv,hd] → one row [nkv,hd] per real token.
        let rows = |t: &Tensor| {
            let flat = t.reshape([b * nmax, self.nkv, self.hd]);
            match &self.w_row {
                Some(r) => flat.index_select(0, r),
                None => flat,
            }
        };
        let _ = kc.index_put_(&self.w_idx, &rows(&k), false);
        let _ = vc.index_put_(&self.w_idx, &rows(&v), false);
        if self.mask.is_none() {
            return decode_attention(&q, kc, vc, self.slots, &self.lens_after);
        }
        let read = |c: &Tensor| {
            if self.consecutive {
                c.narrow(0, self.first, b).narrow(2, 0, lmax)
            } else {
                c.narrow(2, 0, lmax).index_select(0, &self.slot_t)
            }
        };
        attn.attend(&q.transpose(1, 2), &read(kc), &read(vc), self.mask.as_ref(), true)
    }
}
