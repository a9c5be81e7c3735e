//! The prefix cache's bookkeeping (no tensors here): which KV-cache slot
//! holds which tokens, under which adapter and weight version, so that a
//! new sequence can start from the longest cached prefix of its prompt
//! instead of recomputing it.
//!
//! Sources are the live sequences (the positions a running sequence has
//! filled never change) and *retained* slots: a released sequence's slot is
//! kept, with its tokens, until it is evicted (least recently used first,
//! beyond `capacity` slots), flushed (`/flush_cache`), or invalidated — by a
//! weight update (every slot of an older version is dropped) or by unloading
//! its adapter. A match is only ever taken from a slot of the same adapter
//! and the current weight version, so a stale prefix is never served.
use std::collections::HashMap;

/// What a slot's KV was computed with: the adapter (`None`: the base) and
/// the weight version.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Key {
    pub lora: Option<u32>,
    pub version: u64,
}

#[derive(Debug, Clone)]
struct Held {
    tokens: Vec<u32>,
    key: Key,
    last_used: u64,
}

/// A cached prefix found for a new sequence: copy `len` positions of `slot`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Hit {
    pub slot: usize,
    pub len: usize,
}

/// The bookkeeping: live sequences' slots and retained slots.
#[derive(Debug, Default)]
pub struct PrefixIndex {
    /// Live sequences: slot → tokens held.
    live: HashMap<usize, Held>,
    /// Retained slots of released sequences.
    retained: HashMap<usize, Held>,
    /// How many slots may be retained (0: none; the cache is off).
    pub capacity: usize,
    clock: u64,
    /// Prompt tokens looked up, and how many of them came from the cache.
    pub looked_up: u64,
    pub hit_tokens: u64,
}

fn common(a: &[u32], b: &[u32]) -> usize {
    a.iter().zip(b).take_while(|(x, y)| x == y).count()
}

impl PrefixIndex {
    pub fn new(capacity: usize) -> PrefixIndex {
        PrefixIndex { capacity, ..Default::default() }
    }

    /// Whether the cache is on.
    pub fn enabled(&self) -> bool {
        self.capacity > 0
    }

    /// The longest prefix of `ids` held under `key` by a live or retained
    /// slot (at least one token), marking a retained source as used.
    pub fn lookup(&mut self, ids: &[u32], key: Key) -> Option<Hit> {
        if !self.enabled() {
            return None;
        }
        let mut best: Option<Hit> = None;
        for (&slot, h) in self.live.iter().chain(self.retained.iter()) {
            if h.key != key {
                continue;
            }
            let n = common(&h.tokens, ids);
            if n > 0 && best.is_none_or(|b| n > b.len || (n == b.len && slot < b.slot)) {
                best = Some(Hit { slot, len: n });
            }
        }
        if let Some(b) = best {
            self.clock += 1;
            if let Some(h) = self.retained.get_mut(&b.slot) {
                h.last_used = self.clock;
            }
        }
        best
    }

    /// Counts a prompt of `len` tokens of which `cached` came from the cache.
    pub fn count(&mut self, len: usize, cached: usize) {
        self.looked_up += len as u64;
        self.hit_tokens += cached as u64;
    }

    /// A live sequence now holds `tokens` in `slot`.
    pub fn start(&mut self, slot: usize, tokens: Vec<u32>, key: Key) {
        self.retained.remove(&slot);
        self.live.insert(slot, Held { tokens, key, last_used: 0 });
    }

    /// The live sequence of `slot` appended `more`.
    pub fn extend(&mut self, slot: usize, more: &[u32]) {
        if let Some(h) = self.live.get_mut(&slot) {
            h.tokens.extend_from_slice(more);
        }
    }

    /// The live sequence of `slot` ended. Answers the slots to free: `slot`
    /// itself when it is not retained (cache off, or its version is not
    /// `current`), else the least recently used retained slots beyond the
    /// capacity.
    pub fn release(&mut self, slot: usize, current: u64) -> Vec<usize> {
        let Some(mut h) = self.live.remove(&slot) else { return vec![slot] };
        if !self.enabled() || h.key.version != current || h.tokens.is_empty() {
            return vec![slot];
        }
        self.clock += 1;
        h.last_used = self.clock;
        self.retained.insert(slot, h);
        self.evict_beyond(self.capacity)
    }

    /// Drops retained slots (least recently used first) until at most `keep`
    /// remain; answers the slots to free.
    fn evict_beyond(&mut self, keep: usize) -> Vec<usize> {
        let mut out = Vec::new();
        while self.retained.len() > keep {
            let (&slot, _) = self.retained.iter().min_by_key(|(s, h)| (h.last_used, **s)).expect("non-empty");
            self.retained.remove(&slot);
            out.push(slot);
        }
        out
    }

    /// Drops the least recently used retained slot, to reuse it (a new
    /// sequence needs a slot and none is free).
    pub fn evict_one(&mut self) -> Option<usize> {
        let n = self.retained.len();
        self.evict_beyond(n.saturating_sub(1)).pop()
    }

    /// Drops every retained slot; answers them, to free.
    pub fn flush(&mut self) -> Vec<usize> {
        self.evict_beyond(0)
    }

    /// Drops the retained slots that `stale` says are no longer valid (a
    /// weight update, an unloaded adapter); answers them, to free. A live
    /// sequence of an older version is never a source (its key differs from
    /// any looked up) and is freed, not retained, when it ends.
    pub fn drop_where(&mut self, stale: impl Fn(&Key) -> bool) -> Vec<usize> {
        let gone: Vec<usize> = self.retained.iter().filter(|(_, h)| stale(&h.key)).map(|(&s, _)| s).collect();
        for s in &gone {
            self.retained.remove(s);
        }
        gone
    }

    /// Retained slots and the tokens they hold.
    pub fn retained(&self) -> (usize, usize) {
        (self.retained.len(), self.retained.values().map(|h| h.tokens.len()).sum())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const BASE: Key = Key { lora: None, version: 0 };

    #[test]
    fn finds_the_longest_prefix_under_the_same_key() {
        let mut p = PrefixIndex::new(4);
        p.start(0, vec![1, 2, 3, 4], BASE);
        p.start(1, vec![1, 2, 9], BASE);
        assert_eq!(p.lookup(&[1, 2, 3, 7], BASE), Some(Hit { slot: 0, len: 3 }));
        assert_eq!(p.lookup(&[5], BASE), None);
        // Another adapter or version never matches.
        assert_eq!(p.lookup(&[1, 2, 3], Key { lora: Some(0), version: 0 }), None);
        assert_eq!(p.lookup(&[1, 2, 3], Key { lora: None, version: 1 }), None);
        // A released slot is retained and still found; decode steps extend a live one.
        p.extend(1, &[8, 8]);
        assert_eq!(p.release(1, 0), Vec::<usize>::new());
        assert_eq!(p.lookup(&[1, 2, 9, 8, 8, 6], BASE), Some(Hit { slot: 1, len: 5 }));
    }

    #[test]
    fn evicts_the_least_recently_used_and_drops_stale_versions() {
        let mut p = PrefixIndex::new(2);
        for s in 0..3 {
            p.start(s, vec![s as u32 + 1], BASE);
        }
        assert!(p.release(0, 0).is_empty());
        assert!(p.release(1, 0).is_empty());
        p.lookup(&[1], BASE); // slot 0 used again: slot 1 is now the oldest
        assert_eq!(p.release(2, 0), vec![1]);
        assert_eq!(p.retained().0, 2);
        // A weight update: nothing of version 0 is kept or retained.
        assert_eq!(p.drop_where(|k| k.version != 1).len(), 2);
        p.start(3, vec![7], BASE);
        assert_eq!(p.release(3, 1), vec![3], "a slot of an older version is freed, not retained");
        // Off: every release frees.
        let mut off = PrefixIndex::new(0);
        off.start(0, vec![1], BASE);
        assert_eq!(off.lookup(&[1], BASE), None);
        assert_eq!(off.release(0, 0), vec![0]);
    }
}
