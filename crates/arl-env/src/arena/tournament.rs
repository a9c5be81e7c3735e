//! Tournaments over the n samples of one prompt (ArenaRL-style
//! tournament-ranked rewards): every pair once (round robin) or a
//! single-elimination bracket, with a judge deciding each match. Pure
//! bookkeeping: the judge is a closure, so the rules are tested without one.
//!
//! Rewards, in [0, 1]:
//! * round robin: `(wins + ½·ties) / (n − 1)`, the sample's win rate against
//!   the rest of its group; the group's rewards sum to `n/2`.
//! * elimination: `rounds advanced / R`, `R = ⌈log2 n⌉` the number of rounds;
//!   the champion gets 1, a first-round loser 0. Pairs are formed in order
//!   (1 v 2, 3 v 4, …); with an odd number left, the last one gets a bye
//!   (advances without a match). A tied match is decided by a seeded coin
//!   (`mix(seed, round, a, b)`), recorded as `tiebreak`.
//!
//! Rank: 1 + the number of samples with a strictly higher reward.
//! A judge error counts as a tie (recorded with `error`), unless the caller
//! makes it fatal.
use serde_json::{json, Value};

/// A match verdict.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Winner {
    A,
    B,
    Tie,
}

impl Winner {
    pub fn as_str(self) -> &'static str {
        match self {
            Winner::A => "a",
            Winner::B => "b",
            Winner::Tie => "tie",
        }
    }
}

/// A judge's answer for one match: the verdict, and what it said (for `reward_detail`).
#[derive(Debug, Clone)]
pub struct Verdict {
    pub winner: Winner,
    pub note: Value,
}

/// One played match, between group positions `a` and `b`.
#[derive(Debug, Clone)]
pub struct Match {
    pub round: Option<u32>,
    pub a: usize,
    pub b: usize,
    pub winner: Winner,
    /// With a judge error: its message (the match counts as a tie).
    pub error: Option<String>,
    /// Elimination: who advanced after a tie.
    pub tiebreak: Option<usize>,
    pub note: Value,
}

/// The format of a tournament.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Format {
    RoundRobin,
    Elimination,
}

impl Format {
    pub fn name(self) -> &'static str {
        match self {
            Format::RoundRobin => "round-robin",
            Format::Elimination => "elimination",
        }
    }
}

/// The outcome for a group of `n`.
#[derive(Debug, Clone)]
pub struct Standing {
    pub rewards: Vec<f32>,
    pub wins: Vec<f32>,
    pub ties: Vec<u32>,
    pub losses: Vec<u32>,
    /// Elimination: rounds advanced (byes included); round robin: none.
    pub advanced: Vec<u32>,
    pub byes: Vec<u32>,
    pub rounds: u32,
    pub ranks: Vec<u32>,
    pub matches: Vec<Match>,
}

/// Runs a tournament over `n ≥ 2` entrants. `judge(a, b)` compares entrant
/// `a` (shown first) with `b`; an `Err` is a judge error (a tie). `fatal`
/// stops at the first judge error.
pub fn run<F>(format: Format, n: usize, seed: u64, mut judge: F, fatal: bool) -> Result<Standing, String>
where
    F: FnMut(usize, usize) -> Result<Verdict, String>,
{
    let mut st = Standing {
        rewards: vec![0.0; n],
        wins: vec![0.0; n],
        ties: vec![0; n],
        losses: vec![0; n],
        advanced: vec![0; n],
        byes: vec![0; n],
        rounds: 0,
        ranks: vec![1; n],
        matches: Vec::new(),
    };
    let mut play = |a: usize, b: usize, round: Option<u32>, st: &mut Standing| -> Result<Winner, String> {
        let (winner, error, note) = match judge(a, b) {
            Ok(v) => (v.winner, None, v.note),
            Err(e) if fatal => return Err(format!("judge failed on samples {a} and {b}: {e}")),
            Err(e) => (Winner::Tie, Some(e), Value::Null),
        };
        match winner {
            Winner::A => {
                st.wins[a] += 1.0;
                st.losses[b] += 1;
            }
            Winner::B => {
                st.wins[b] += 1.0;
                st.losses[a] += 1;
            }
            Winner::Tie => {
                st.ties[a] += 1;
                st.ties[b] += 1;
            }
        }
        st.matches.push(Match { round, a, b, winner, error, tiebreak: None, note });
        Ok(winner)
    };
    match format {
        Format::RoundRobin => {
            for a in 0..n {
                for b in a + 1..n {
                    play(a, b, None, &mut st)?;
                }
            }
            for i in 0..n {
                st.rewards[i] = (st.wins[i] + 0.5 * st.ties[i] as f32) / (n - 1).max(1) as f32;
            }
        }
        Format::Elimination => {
            let rounds = (n as f64).log2().ceil() as u32;
            st.rounds = rounds;
            let mut alive: Vec<usize> = (0..n).collect();
            let mut round = 1u32;
            while alive.len() > 1 {
                let mut next = Vec::with_capacity(alive.len().div_ceil(2));
                for pair in alive.chunks(2) {
                    match *pair {
                        [a, b] => {
                            let w = play(a, b, Some(round), &mut st)?;
                            let adv = match w {
                                Winner::A => a,
                                Winner::B => b,
                                Winner::Tie => {
                                    let coin = arl_core::rng::mix(&[seed, round as u64, a as u64, b as u64]) & 1;
                                    let t = if coin == 0 { a } else { b };
                                    if let Some(m) = st.matches.last_mut() {
                                        m.tiebreak = Some(t);
                                    }
                                    t
                                }
                            };
                            next.push(adv);
                        }
                        [a] => {
                            st.byes[a] += 1;
                            next.push(a);
                        }
                        _ => unreachable!("chunks(2)"),
                    }
                }
                for &w in &next {
                    st.advanced[w] += 1;
                }
                alive = next;
                round += 1;
            }
            for i in 0..n {
                st.rewards[i] = if rounds == 0 { 1.0 } else { st.advanced[i] as f32 / rounds as f32 };
            }
        }
    }
    for i in 0..n {
        st.ranks[i] = 1 + st.rewards.iter().filter(|&&r| r > st.rewards[i]).count() as u32;
    }
    Ok(st)
}

impl Standing {
    /// The group's order, best first (positions; ties keep group order).
    pub fn order(&self) -> Vec<usize> {
        let mut o: Vec<usize> = (0..self.rewards.len()).collect();
        o.sort_by(|&a, &b| self.rewards[b].partial_cmp(&self.rewards[a]).unwrap_or(std::cmp::Ordering::Equal));
        o
    }

    /// The matches entrant `i` played, as JSON; `label(k)` names entrant `k`
    /// (its `sample_index`).
    pub fn matches_of(&self, i: usize, label: &dyn Fn(usize) -> Value) -> Vec<Value> {
        self.matches
            .iter()
            .filter(|m| m.a == i || m.b == i)
            .map(|m| {
                let mut v = json!({"a": label(m.a), "b": label(m.b), "winner": m.winner.as_str()});
                if let Some(r) = m.round {
                    v["round"] = json!(r);
                }
                if let Some(t) = m.tiebreak {
                    v["tiebreak"] = label(t);
                }
                if let Some(e) = &m.error {
                    v["error"] = json!(e);
                }
                if !m.note.is_null() {
                    v["judge"] = m.note.clone();
                }
                v
            })
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Entrant k has quality q[k]; the better one wins, equal ones tie.
    fn by_quality(q: &[i32]) -> impl FnMut(usize, usize) -> Result<Verdict, String> + '_ {
        move |a, b| {
            let w = match q[a].cmp(&q[b]) {
                std::cmp::Ordering::Greater => Winner::A,
                std::cmp::Ordering::Less => Winner::B,
                std::cmp::Ordering::Equal => Winner::Tie,
            };
            Ok(Verdict { winner: w, note: Value::Null })
        }
    }

    #[test]
    fn round_robin_is_the_win_rate_and_sums_to_half_n() {
        let q = [3, 1, 4, 1, 5];
        let st = run(Format::RoundRobin, 5, 0, by_quality(&q), false).unwrap();
        assert_eq!(st.matches.len(), 10);
        assert_eq!(st.rewards, vec![0.5, 0.125, 0.75, 0.125, 1.0]);
        assert!((st.rewards.iter().sum::<f32>() - 2.5).abs() < 1e-6);
        assert_eq!(st.order(), vec![4, 2, 0, 1, 3]);
        assert_eq!(st.ranks, vec![3, 4, 2, 4, 1]);
    }

    #[test]
    fn elimination_with_a_bye_and_a_seeded_tiebreak() {
        let q = [1, 2, 3];
        let st = run(Format::Elimination, 3, 0, by_quality(&q), false).unwrap();
        // Round 1: 0 v 1 (1 wins), 2 has a bye; final: 1 v 2 (2 wins).
        assert_eq!(st.rounds, 2);
        assert_eq!(st.byes, vec![0, 0, 1]);
        assert_eq!(st.rewards, vec![0.0, 0.5, 1.0]);
        let q = [7, 7];
        let a = run(Format::Elimination, 2, 9, by_quality(&q), false).unwrap();
        let b = run(Format::Elimination, 2, 9, by_quality(&q), false).unwrap();
        assert_eq!(a.rewards, b.rewards);
        assert_eq!(a.rewards.iter().sum::<f32>(), 1.0);
        assert!(a.matches[0].tiebreak.is_some());
    }

    #[test]
    fn judge_errors_are_ties_or_fatal() {
        let st = run(Format::RoundRobin, 2, 0, |_, _| Err("no verdict".into()), false).unwrap();
        assert_eq!(st.rewards, vec![0.5, 0.5]);
        assert_eq!(st.matches[0].error.as_deref(), Some("no verdict"));
        assert!(run(Format::RoundRobin, 2, 0, |_, _| Err("no verdict".into()), true).is_err());
    }
}
