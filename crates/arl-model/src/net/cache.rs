//! The KV cache of inference: many sequences, one slot each ([`KvCache`]).
//! The cached forward that fills it is in `infer`.
use tch::{Device, Kind, Tensor};

/// Key/value cache of many sequences at once, one *slot* each: for every
/// layer K and V are [slots, nkv, capacity, hd] (after RoPE, before GQA
/// repetition), slot i valid for its first `len(i)` positions. A decode step
/// writes every sequence's new key with one indexed store and reads the batch
/// with one gather (none when the slots are consecutive), instead of copying
/// each sequence's cache separately; capacity and slot count double when full.
pub struct KvCache {
    pub(super) k: Vec<Tensor>,
    pub(super) v: Vec<Tensor>,
    /// RoPE cos and signed sin of positions `0..rope_len`, [rope_len, hd]
    /// (grown on demand): a decode step looks its positions up.
    pub(super) rope: Option<(Tensor, Tensor)>,
    pub(super) rope_len: usize,
    pub(super) lens: Vec<usize>,
    pub(super) used: Vec<bool>,
    pub(super) nkv: i64,
    pub(super) hd: i64,
    pub(super) kind: Kind,
    pub(super) device: Device,
}

impl KvCache {
    /// Claims a free slot (the lowest, so running sequences stay packed).
    pub fn alloc(&mut self) -> usize {
        if let Some(i) = self.used.iter().position(|u| !u) {
            self.used[i] = true;
            self.lens[i] = 0;
            return i;
        }
        let old = self.used.len();
        let new = (old * 2).max(8);
        self.resize(new as i64, self.capacity());
        self.used.resize(new, false);
        self.lens.resize(new, 0);
        self.used[old] = true;
        old
    }

    /// Whether a slot is free (claiming one would not grow the cache).
    pub fn has_free(&self) -> bool {
        self.used.iter().any(|u| !u)
    }

    /// Frees a slot.
    pub fn free(&mut self, slot: usize) {
        if let Some(u) = self.used.get_mut(slot) {
            *u = false;
            self.lens[slot] = 0;
        }
    }

    /// Valid positions of a slot.
    pub fn len(&self, slot: usize) -> usize {
        self.lens[slot]
    }

    /// Number of slots in use.
    pub fn active(&self) -> usize {
        self.used.iter().filter(|u| **u).count()
    }

    /// Makes slot `dst` hold the first `n` positions of slot `src` (a shared
    /// prefix: the keys and values of the same tokens at the same positions
    /// are the same), and nothing after them.
    pub fn copy_prefix(&mut self, src: usize, dst: usize, n: usize) {
        assert!(n <= self.lens[src], "slot {src} holds {} positions, not {n}", self.lens[src]);
        if src != dst && n > 0 {
            let (s, d, n) = (src as i64, dst as i64, n as i64);
            for t in self.k.iter_mut().chain(self.v.iter_mut()) {
                let from = t.narrow(0, s, 1).narrow(2, 0, n);
                t.narrow(0, d, 1).narrow(2, 0, n).copy_(&from);
            }
        }
        self.lens[dst] = n;
    }

    /// Forgets everything of a slot after its first `n` positions (prefix reuse).
    pub fn truncate(&mut self, slot: usize, n: usize) {
        self.lens[slot] = self.lens[slot].min(n);
    }

    fn capacity(&self) -> i64 {
        self.k.first().map_or(0, |t| t.size()[2])
    }

    fn resize(&mut self, slots: i64, cap: i64) {
        let (nkv, hd, kind, dev) = (self.nkv, self.hd, self.kind, self.device);
        let grow = |old: &Tensor| {
            let s = old.size();
            let t = Tensor::zeros([slots, nkv, cap, hd], (kind, dev));
            if s[0] > 0 && s[2] > 0 {
                t.narrow(0, 0, s[0]).narrow(2, 0, s[2]).copy_(old);
            }
            t
        };
        self.k = self.k.iter().map(grow).collect();
        self.v = self.v.iter().map(grow).collect();
    }

    /// Makes room for `need` positions in every slot.
    pub(super) fn reserve(&mut self, need: usize) {
        let cap = self.capacity();
        if need as i64 > cap {
            let slots = self.used.len() as i64;
            self.resize(slots, (need as i64).max(cap * 2).max(64));
        }
    }
}
