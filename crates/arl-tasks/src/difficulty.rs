//! Adaptive difficulty (`--difficulty auto --history FILE…`), in the spirit of
//! RLVE (Zeng et al. 2025): per level accuracy from earlier scored
//! trajectories; the current level is the level of the most recent record
//! (files in the order given); once it has enough samples it moves up when
//! its accuracy is above the band and down when below, so the policy trains
//! where it can still learn.
use anyhow::{Context, Result};
use arl_core::io::RecordReader;
use std::collections::BTreeMap;
use std::path::PathBuf;

#[derive(Debug, Clone, Copy)]
pub struct Band {
    pub low: f64,
    pub high: f64,
    /// Scored samples a level needs before it counts.
    pub min_samples: u64,
}

/// Accuracy per level: (samples, sum of rewards) of records of `family` with a reward.
/// Also returns the level of the last such record.
pub fn accuracy_by_level(files: &[PathBuf], family: &str) -> Result<(BTreeMap<u32, (u64, f64)>, Option<u32>)> {
    let mut acc: BTreeMap<u32, (u64, f64)> = BTreeMap::new();
    let mut last = None;
    for f in files {
        let rd = RecordReader::open(f).with_context(|| format!("reading history `{}`", f.display()))?;
        for item in rd {
            let item = item?;
            let (_, r) = item.map_err(anyhow::Error::new)?;
            if r.data_source.as_deref().is_some_and(|d| d != family) {
                continue;
            }
            let (Some(rew), Some(d)) = (r.reward, r.meta("difficulty").and_then(|v| v.as_u64())) else { continue };
            last = Some(d as u32);
            let e = acc.entry(d as u32).or_default();
            e.0 += 1;
            // Rewards above 1 (bonuses) count as solved, below 0 as failed.
            e.1 += (rew as f64).clamp(0.0, 1.0);
        }
    }
    Ok((acc, last))
}

/// The next level: from the current (last seen) level, one up if its
/// accuracy is at or above `high`, one down if at or below `low`, else the same.
pub fn next_level(acc: &BTreeMap<u32, (u64, f64)>, last: Option<u32>, band: Band, max: u32) -> (u32, String) {
    let Some(lvl) = last else { return (1, "no scored history: starting at level 1".into()) };
    let (n, s) = acc.get(&lvl).copied().unwrap_or((0, 0.0));
    if n < band.min_samples {
        return (lvl, format!("level {lvl} has {n} scored samples (< {}): staying", band.min_samples));
    }
    let a = s / n as f64;
    if a >= band.high && lvl < max {
        (lvl + 1, format!("level {lvl} accuracy {a:.2} over {n} >= {}: up to {}", band.high, lvl + 1))
    } else if a <= band.low && lvl > 1 {
        (lvl - 1, format!("level {lvl} accuracy {a:.2} over {n} <= {}: down to {}", band.low, lvl - 1))
    } else {
        (lvl, format!("level {lvl} accuracy {a:.2} over {n}: staying"))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn moves_within_the_band() {
        let band = Band { low: 0.2, high: 0.8, min_samples: 4 };
        let mut m = BTreeMap::new();
        assert_eq!(next_level(&m, None, band, 10).0, 1);
        m.insert(1, (10, 9.0));
        assert_eq!(next_level(&m, Some(1), band, 10).0, 2);
        m.insert(2, (10, 5.0));
        assert_eq!(next_level(&m, Some(2), band, 10).0, 2);
        m.insert(3, (10, 1.0));
        assert_eq!(next_level(&m, Some(3), band, 10).0, 2);
        m.insert(4, (2, 0.0));
        assert_eq!(next_level(&m, Some(4), band, 10).0, 4, "too few samples at 4");
        m.insert(10, (10, 10.0));
        assert_eq!(next_level(&m, Some(10), band, 10).0, 10, "capped");
    }
}
