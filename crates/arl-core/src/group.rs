//! Groups of trajectories sampled from one prompt, formed by `prompt_id`
//! (never by position), for `arl-advantage` and `arl-filter`.
//!
//! With an expected size, a group is handed back the moment its last record
//! arrives, so memory holds only the groups still in flight; without one,
//! groups are held until the input ends and come back in order of their first
//! record. Records keep their input order within a group.
use crate::io::Pos;
use crate::record::Record;
use std::collections::{BTreeMap, HashMap, HashSet};

/// The records of one `prompt_id`, in input order.
#[derive(Debug)]
pub struct Group {
    pub id: String,
    pub items: Vec<(Pos, Record)>,
    indices: HashSet<u32>,
}

/// Why a record could not join a group.
#[derive(Debug)]
pub enum Refused {
    /// No `prompt_id`.
    NoId,
    /// Its (`prompt_id`, `sample_index`) was seen before.
    Duplicate { id: String, index: u32 },
    /// Its group was already complete at the expected size.
    Overfull { id: String, size: usize },
}

impl std::fmt::Display for Refused {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Refused::NoId => write!(f, "field `prompt_id`: missing; groups are formed by `prompt_id`"),
            Refused::Duplicate { id, index } => {
                write!(f, "field `sample_index`: duplicated (`prompt_id` `{id}`, `sample_index` {index})")
            }
            Refused::Overfull { id, size } => write!(
                f,
                "field `prompt_id`: group `{id}` already had its {size} records (`--group-size {size}`); a prompt_id is never reused"
            ),
        }
    }
}

/// Collects records into groups.
#[derive(Debug, Default)]
pub struct Grouper {
    size: Option<usize>,
    seq: u64,
    /// prompt_id → order of its first record.
    open: HashMap<String, u64>,
    groups: BTreeMap<u64, Group>,
    /// Groups already handed back at full size (to catch a reused id).
    done: HashSet<String>,
}

impl Grouper {
    /// `size`: the expected group size; complete groups are returned by [`Grouper::push`].
    pub fn new(size: Option<usize>) -> Grouper {
        Grouper { size, ..Default::default() }
    }

    /// Adds a record. Returns its group when that is now complete. On refusal
    /// the record comes back with the reason.
    #[allow(clippy::result_large_err)]
    pub fn push(&mut self, pos: Pos, rec: Record) -> Result<Option<Group>, (Pos, Record, Refused)> {
        let Some(id) = rec.prompt_id.clone() else {
            return Err((pos, rec, Refused::NoId));
        };
        if let Some(size) = self.size {
            if self.done.contains(&id) {
                return Err((pos, rec, Refused::Overfull { id, size }));
            }
        }
        let key = match self.open.get(&id) {
            Some(&k) => k,
            None => {
                let k = self.seq;
                self.seq += 1;
                self.open.insert(id.clone(), k);
                self.groups.insert(k, Group { id: id.clone(), items: Vec::new(), indices: HashSet::new() });
                k
            }
        };
        let g = self.groups.get_mut(&key).expect("open group");
        if let Some(ix) = rec.sample_index {
            if !g.indices.insert(ix) {
                return Err((pos, rec, Refused::Duplicate { id, index: ix }));
            }
        }
        g.items.push((pos, rec));
        if self.size == Some(g.items.len()) {
            self.open.remove(&id);
            self.done.insert(id);
            return Ok(self.groups.remove(&key));
        }
        Ok(None)
    }

    /// Groups still open: all groups when no size was given, else the incomplete ones.
    pub fn in_flight(&self) -> usize {
        self.groups.len()
    }

    /// Every group still held, in order of first record (at the end of input).
    pub fn drain(&mut self) -> Vec<Group> {
        self.open.clear();
        std::mem::take(&mut self.groups).into_values().collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rec(id: &str, ix: u32) -> (Pos, Record) {
        let pos = Pos { source: "t".into(), index: 0, is_row: false };
        (pos, Record { prompt_id: Some(id.into()), sample_index: Some(ix), ..Default::default() })
    }

    #[test]
    fn groups_by_id_not_position() {
        let mut g = Grouper::new(Some(2));
        for (id, ix) in [("a", 0), ("b", 0), ("c", 0)] {
            let (p, r) = rec(id, ix);
            assert!(g.push(p, r).unwrap().is_none());
        }
        let (p, r) = rec("b", 1);
        let done = g.push(p, r).unwrap().expect("b complete");
        assert_eq!(done.id, "b");
        assert_eq!(done.items.len(), 2);
        let (p, r) = rec("b", 2);
        assert!(matches!(g.push(p, r), Err((_, _, Refused::Overfull { .. }))));
        let (p, r) = rec("a", 0);
        assert!(matches!(g.push(p, r), Err((_, _, Refused::Duplicate { .. }))));
        let rest: Vec<String> = g.drain().into_iter().map(|g| g.id).collect();
        assert_eq!(rest, vec!["a", "c"]);
    }
}
