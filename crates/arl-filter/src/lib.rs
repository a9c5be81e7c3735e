//! The decisions of `arl-filter` (DAPO dynamic sampling, status, length,
//! staleness, over-sampling cut) and its tally of what was kept and dropped
//! by reason, kept separate from I/O so that the counts can be tested.
//!
//! Per-record filters run first, in a fixed order (status, min length, max
//! length, staleness), and a dropped record counts under its first reason.
//! Group filters then see the surviving records: incomplete group, zero reward
//! spread, over the `--keep-groups` limit.
use arl_core::record::{Record, Status};
use serde_json::{json, Map, Value};

/// Per-record drop reasons, in the order they are checked.
pub const RECORD_REASONS: [&str; 4] = ["status", "min_response_len", "max_response_len", "stale"];
/// Group drop reasons, in the order they are checked.
pub const GROUP_REASONS: [&str; 4] = ["all_records_dropped", "incomplete_group", "zero_std", "over_keep_groups"];

/// The filters of one run.
#[derive(Debug, Clone, Default)]
pub struct Rules {
    pub drop_status: Vec<Status>,
    pub min_len: Option<usize>,
    pub max_len: Option<usize>,
    /// (current version, max staleness)
    pub staleness: Option<(u64, u64)>,
    /// Reward std at or below which a group is dropped.
    pub zero_std: Option<f64>,
    pub group_size: Option<usize>,
    pub keep_groups: Option<u64>,
}

impl Rules {
    /// Whether records must be grouped (some filter looks at whole groups).
    pub fn grouped(&self) -> bool {
        self.zero_std.is_some() || self.group_size.is_some() || self.keep_groups.is_some()
    }

    /// The fields these rules read (the only columns decoded from a Parquet
    /// input; the others pass through).
    pub fn reads(&self) -> Vec<&'static str> {
        let mut f = Vec::new();
        if self.zero_std.is_some() {
            f.push("reward");
        }
        if !self.drop_status.is_empty() {
            f.push("status");
        }
        if self.min_len.is_some() || self.max_len.is_some() {
            f.extend(["tokens", "prompt_len", "loss_mask"]);
        }
        if self.staleness.is_some() {
            f.push("weight_versions");
        }
        if self.grouped() {
            f.push("prompt_id");
        }
        f
    }

    /// Why a record cannot be judged (a field a filter needs is missing or malformed).
    pub fn check(&self, r: &Record) -> Option<String> {
        if self.zero_std.is_some() {
            match r.reward {
                None => return Some("field `reward`: missing; `--drop-zero-std` needs it".into()),
                Some(x) if !x.is_finite() => return Some(format!("field `reward`: {x} is not a finite number")),
                _ => {}
            }
        }
        if !self.drop_status.is_empty() && r.status.is_none() {
            return Some("field `status`: missing; `--drop-status` needs it".into());
        }
        if (self.min_len.is_some() || self.max_len.is_some()) && response_len(r).is_none() {
            return Some("field `tokens`: missing (with `prompt_len`, or `loss_mask`); the length filters need the response length".into());
        }
        if self.staleness.is_some() {
            if let Err(e) = oldest_version(r) {
                return Some(e);
            }
        }
        if self.grouped() && r.prompt_id.is_none() {
            return Some("field `prompt_id`: missing; group filters form groups by it".into());
        }
        None
    }

    /// The first per-record reason to drop `r`, if any. Call [`Rules::check`] first.
    pub fn record_reason(&self, r: &Record) -> Option<&'static str> {
        if let Some(s) = r.status {
            if self.drop_status.contains(&s) {
                return Some("status");
            }
        }
        let len = response_len(r);
        if let (Some(min), Some(l)) = (self.min_len, len) {
            if l < min {
                return Some("min_response_len");
            }
        }
        if let (Some(max), Some(l)) = (self.max_len, len) {
            if l > max {
                return Some("max_response_len");
            }
        }
        if let Some((current, k)) = self.staleness {
            if let Ok(Some(v)) = oldest_version(r) {
                if current.saturating_sub(v) > k {
                    return Some("stale");
                }
            }
        }
        None
    }

    /// The group reason to drop the surviving records `kept` of a group that had
    /// `total` records, or None to keep it. `keep_groups` counting is the caller's.
    pub fn group_reason(&self, kept: &[&Record]) -> Option<&'static str> {
        if kept.is_empty() {
            return Some("all_records_dropped");
        }
        if let Some(n) = self.group_size {
            if kept.len() != n {
                return Some("incomplete_group");
            }
        }
        if let Some(eps) = self.zero_std {
            let r: Vec<f64> = kept.iter().map(|x| x.reward.unwrap_or(0.0) as f64).collect();
            if population_std(&r) <= eps {
                return Some("zero_std");
            }
        }
        None
    }
}

/// Response length in tokens: `len(tokens) - prompt_len`, else `len(loss_mask)`.
pub fn response_len(r: &Record) -> Option<usize> {
    r.response_len().or_else(|| r.loss_mask.as_ref().map(Vec::len))
}

/// The oldest weight version a record was generated with (staleness is measured
/// from it, as a partial rollout spanning updates is as old as its first part).
fn oldest_version(r: &Record) -> Result<Option<u64>, String> {
    let Some(v) = &r.weight_versions else {
        return Err("field `weight_versions`: missing; `--max-staleness` needs it".into());
    };
    let mut oldest: Option<u64> = None;
    for s in v {
        let n: u64 = s.trim().parse().map_err(|_| {
            format!(
                "field `weight_versions`: `{s}` is not a decimal step number; staleness compares versions as integers"
            )
        })?;
        oldest = Some(oldest.map_or(n, |o| o.min(n)));
    }
    if oldest.is_none() {
        return Err("field `weight_versions`: empty; `--max-staleness` needs at least one version".into());
    }
    Ok(oldest)
}

fn population_std(x: &[f64]) -> f64 {
    if x.is_empty() {
        return 0.0;
    }
    let m = x.iter().sum::<f64>() / x.len() as f64;
    (x.iter().map(|v| (v - m) * (v - m)).sum::<f64>() / x.len() as f64).sqrt()
}

/// Counts of records and groups kept and dropped, by reason.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Tally {
    pub records_kept: u64,
    pub groups_kept: u64,
    /// reason → (records, groups), in first-seen order of `RECORD_REASONS` then `GROUP_REASONS`.
    pub dropped: Vec<(&'static str, u64, u64)>,
}

impl Tally {
    pub fn drop_records(&mut self, reason: &'static str, n: u64) {
        self.entry(reason).1 += n;
    }
    pub fn drop_group(&mut self, reason: &'static str) {
        self.entry(reason).2 += 1;
    }
    fn entry(&mut self, reason: &'static str) -> &mut (&'static str, u64, u64) {
        let i = match self.dropped.iter().position(|e| e.0 == reason) {
            Some(i) => i,
            None => {
                self.dropped.push((reason, 0, 0));
                self.dropped.len() - 1
            }
        };
        &mut self.dropped[i]
    }
    fn order(&self) -> Vec<(&'static str, u64, u64)> {
        let mut v = self.dropped.clone();
        let rank = |r: &str| RECORD_REASONS.iter().chain(&GROUP_REASONS).position(|x| *x == r).unwrap_or(usize::MAX);
        v.sort_by_key(|e| rank(e.0));
        v
    }
    pub fn records_dropped(&self) -> u64 {
        self.dropped.iter().map(|e| e.1).sum()
    }
    pub fn groups_dropped(&self) -> u64 {
        self.dropped.iter().map(|e| e.2).sum()
    }

    /// The summary as JSON; `read` and `rejected` come from the input.
    /// `records.read = kept + dropped + rejected`, `groups.in = kept + dropped`.
    pub fn to_json(&self, read: u64, rejected: u64) -> Value {
        let mut by = Map::new();
        for (r, n, g) in self.order() {
            by.insert(r.to_string(), json!({"records": n, "groups": g}));
        }
        json!({
            "records": {"read": read, "kept": self.records_kept, "dropped": self.records_dropped(), "rejected": rejected},
            "groups": {"in": self.groups_kept + self.groups_dropped(), "kept": self.groups_kept, "dropped": self.groups_dropped()},
            "dropped_by_reason": by,
        })
    }

    /// The same as one human line per item, for stderr.
    pub fn to_text(&self, tool: &str, read: u64, rejected: u64) -> String {
        let gin = self.groups_kept + self.groups_dropped();
        let mut s = format!(
            "{tool}: kept {} of {read} records ({} of {gin} groups); dropped {} records, {} groups",
            self.records_kept,
            self.groups_kept,
            self.records_dropped(),
            self.groups_dropped()
        );
        if rejected > 0 {
            s += &format!("; {rejected} rejected");
        }
        s.push('\n');
        for (r, n, g) in self.order() {
            s += &format!("{tool}:   dropped by {r}: {n} records, {g} groups\n");
        }
        s
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rec(reward: f32, status: Status, len: usize, version: &str) -> Record {
        Record {
            prompt_id: Some("p".into()),
            reward: Some(reward),
            status: Some(status),
            loss_mask: Some(vec![1; len]),
            weight_versions: Some(vec![version.into()]),
            ..Default::default()
        }
    }

    #[test]
    fn record_reasons_in_order() {
        let rules = Rules {
            drop_status: vec![Status::Truncated],
            min_len: Some(2),
            max_len: Some(5),
            staleness: Some((10, 2)),
            ..Default::default()
        };
        assert_eq!(rules.record_reason(&rec(1.0, Status::Truncated, 1, "1")), Some("status"));
        assert_eq!(rules.record_reason(&rec(1.0, Status::Completed, 1, "1")), Some("min_response_len"));
        assert_eq!(rules.record_reason(&rec(1.0, Status::Completed, 6, "10")), Some("max_response_len"));
        assert_eq!(rules.record_reason(&rec(1.0, Status::Completed, 3, "7")), Some("stale"));
        assert_eq!(rules.record_reason(&rec(1.0, Status::Completed, 3, "8")), None);
        let mut bad = rec(1.0, Status::Completed, 3, "x");
        assert!(rules.check(&bad).is_some());
        bad.weight_versions = Some(vec!["9".into(), "3".into()]);
        assert_eq!(rules.record_reason(&bad), Some("stale"));
    }

    #[test]
    fn group_reasons() {
        let rules = Rules { zero_std: Some(1e-6), group_size: Some(2), ..Default::default() };
        let a = rec(1.0, Status::Completed, 3, "1");
        let b = rec(0.0, Status::Completed, 3, "1");
        assert_eq!(rules.group_reason(&[&a, &b]), None);
        assert_eq!(rules.group_reason(&[&a, &a]), Some("zero_std"));
        assert_eq!(rules.group_reason(&[&a]), Some("incomplete_group"));
        assert_eq!(rules.group_reason(&[]), Some("all_records_dropped"));
    }
}
