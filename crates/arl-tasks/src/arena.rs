//! `arena`: board-game tasks for `arl-rollout --arena` (tic-tac-toe or
//! Connect Four, [`arl_env::arena::game`]). A task is a starting position:
//! level 1 is the empty board, level L opens with L−1 random legal moves
//! (at most 4 in tic-tac-toe, 12 in Connect Four) that do not end the game,
//! written to `metadata.opening`. The prompt states the rules; rollout adds
//! each seat's mark and the board. There is no label: the game's outcome is
//! the verdict (`arl-reward --rm game`).
use super::Task;
use arl_core::rng::Rng;
use arl_env::arena::game::{Board, Game};
use serde_json::{json, Map, Value};

pub fn generate(rng: &mut Rng, level: u32, game: Game) -> Task {
    let cap = match game {
        Game::TicTacToe => 4,
        Game::ConnectFour => 12,
    };
    let want = (level.saturating_sub(1) as usize).min(cap);
    let mut b = Board::new(game);
    let mut opening = Vec::new();
    while opening.len() < want {
        let quiet: Vec<i64> = b
            .legal_moves()
            .into_iter()
            .filter(|&m| {
                let mut t = b.clone();
                t.play(m).is_ok() && t.outcome().is_none()
            })
            .collect();
        if quiet.is_empty() {
            break;
        }
        let m = *rng.choose(&quiet);
        b.play(m).expect("a legal move");
        opening.push(m);
    }
    let mut metadata = Map::new();
    metadata.insert("game".into(), json!(game.name()));
    metadata.insert("opening".into(), json!(opening));
    Task {
        prompt: game.rules().to_string(),
        label: Value::Null,
        response: String::new(),
        messages: None,
        metadata,
        tools: vec![],
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn openings_are_legal_and_leave_the_game_open() {
        for level in 1..=10 {
            for seed in 0..20 {
                let t = generate(&mut Rng::new(seed), level, Game::TicTacToe);
                let op: Vec<i64> =
                    t.metadata["opening"].as_array().unwrap().iter().map(|x| x.as_i64().unwrap()).collect();
                assert_eq!(op.len(), ((level - 1) as usize).min(4));
                let mut b = Board::new(Game::TicTacToe);
                for m in op {
                    b.play(m).unwrap();
                }
                assert!(b.outcome().is_none());
            }
        }
    }
}
