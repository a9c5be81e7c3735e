//! Readable views of arena records for `arl-inspect show`: a game replayed
//! move by move from `metadata.arena` (boards, who moved what, refused
//! attempts, who won and how), and a tournament's ranking and matches from
//! `reward_detail` of `arl-reward --rm arena`.
use arl_env_core::game::{self, Board, Game};
use serde_json::Value;

/// The game section of a record played by `arl-rollout --arena`, if it is one.
pub fn game_section(meta: &serde_json::Map<String, Value>) -> Option<String> {
    let a = meta.get("arena")?;
    let g = Game::parse(a.get("game")?.as_str()?)?;
    let str_of = |k: &str| a.get(k).and_then(Value::as_str).unwrap_or("-").to_string();
    let mut s = format!(
        "{} game {}: this record is seat {} ({}), {} vs {}; result: {}",
        g.name(),
        meta.get("episode_id").and_then(Value::as_str).unwrap_or("-"),
        str_of("seat"),
        str_of("mark"),
        str_of("player"),
        str_of("opponent"),
        str_of("result").to_uppercase(),
    );
    match a.get("winner").and_then(Value::as_str) {
        Some(w) => s += &format!(" (winner: {w} by {})\n", str_of("reason")),
        None => s += &format!(" ({})\n", str_of("reason")),
    }
    if let Some(f) = a.get("forfeit").filter(|f| !f.is_null()) {
        s += &format!(
            "forfeit by {}: {}\n",
            f.get("seat").and_then(Value::as_str).unwrap_or("?"),
            f.get("why").and_then(Value::as_str).unwrap_or("?")
        );
    }
    s += &format!("illegal attempts by this seat: {}\n", a.get("illegal_moves").and_then(Value::as_u64).unwrap_or(0));
    let mut b = Board::new(g);
    if let Some(op) = a.get("opening").and_then(Value::as_array).filter(|o| !o.is_empty()) {
        for m in op.iter().filter_map(Value::as_i64) {
            let _ = b.play(m);
        }
        s +=
            &format!("opening {:?}:\n{}", op.iter().filter_map(Value::as_i64).collect::<Vec<_>>(), indent(&b.render()));
    }
    for (k, mv) in a.get("moves").and_then(Value::as_array).into_iter().flatten().enumerate() {
        let seat = mv.get("seat").and_then(Value::as_str).unwrap_or("?");
        let Some(m) = mv.get("move").and_then(Value::as_i64) else { continue };
        let who = game::mark(b.to_move());
        if let Err(e) = b.play(m) {
            s += &format!("move {}: {seat} plays {m}: not replayable ({e})\n", k + 1);
            break;
        }
        s += &format!("move {}: {seat} ({who}) plays {} {m}\n{}", k + 1, g.arg(), indent(&b.render()));
    }
    Some(s)
}

/// The tournament section of a record scored by `arl-reward --rm arena`.
pub fn tournament_section(detail: &Value) -> Option<String> {
    let format = detail.get("arena")?.as_str()?;
    let mut s = format!(
        "{format} tournament, judge {}: rank {} of {}, {} wins / {} ties / {} losses",
        detail.get("judge").and_then(Value::as_str).unwrap_or("?"),
        detail.get("rank").map_or("?".into(), Value::to_string),
        detail.get("group_size").map_or("?".into(), Value::to_string),
        detail.get("wins").map_or("?".into(), Value::to_string),
        detail.get("ties").map_or("?".into(), Value::to_string),
        detail.get("losses").map_or("?".into(), Value::to_string),
    );
    if let Some(adv) = detail.get("advanced") {
        s += &format!(", advanced {adv} of {} rounds", detail.get("rounds").map_or("?".into(), Value::to_string));
    }
    s.push('\n');
    if let Some(r) = detail.get("ranking").and_then(Value::as_array) {
        s += &format!(
            "ranking (sample indices, best first): {}\n",
            r.iter().map(Value::to_string).collect::<Vec<_>>().join(" > ")
        );
    }
    for m in detail.get("matches").and_then(Value::as_array).into_iter().flatten() {
        let a = m.get("a").map_or("?".into(), Value::to_string);
        let b = m.get("b").map_or("?".into(), Value::to_string);
        let w = match m.get("winner").and_then(Value::as_str) {
            Some("a") => format!("{a} wins"),
            Some("b") => format!("{b} wins"),
            _ => "tie".to_string(),
        };
        let round = m.get("round").map_or(String::new(), |r| format!("round {r}: "));
        let mut line = format!("  {round}{a} vs {b}: {w}");
        if let Some(t) = m.get("tiebreak") {
            line += &format!(" ({t} advances on the tie-break coin)");
        }
        if let Some(e) = m.get("error").and_then(Value::as_str) {
            line += &format!(" [judge error: {e}]");
        }
        s += &line;
        s.push('\n');
    }
    Some(s)
}

fn indent(t: &str) -> String {
    t.lines().map(|l| format!("    {l}\n")).collect()
}
