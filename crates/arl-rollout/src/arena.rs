//! Arena: multi-agent episodes in which two players (copies of one policy in
//! self-play, or the policy and an opponent behind another server) take turns
//! in a built-in board game with a rule-based outcome (`arl-rollout --arena`).
//!
//! Each seat keeps its own token-in/token-out conversation (docs/DESIGN.md §4):
//! its prompt is rendered with the chat template, the `move` tool in the
//! system turn, when the seat first moves (so it shows the board it faces);
//! each of its turns is generated on its seat's server and appended as is
//! (loss mask 1); the answer to its move — the opponent's reply and the new
//! board, or why the move was refused — comes back as the template's tool
//! turn (loss mask 0). So each seat's trajectory is an ordinary record, and
//! both records of one game share `metadata.episode_id`.
//!
//! Rules of a turn: the turn must hold exactly one `move` tool call with a
//! legal move. Anything else (no call, a malformed call, another tool, several
//! calls, an illegal or occupied cell, a turn cut at the token limit) is an
//! illegal attempt: the move is refused with an observation saying why, and
//! the seat tries again, at most `retries` times per move; one more illegal
//! attempt forfeits the game. A seat whose `--max-response-len` runs out also
//! forfeits (its record is `truncated`).
//!
//! The result goes to `metadata.arena` (game, seat, opponent, result, how it
//! ended, the moves, the final board); `arl-reward --rm game` turns it into a
//! reward, so records stay replayable under another reward scale.
use crate::client::GenError;
use crate::episode::{Episode, Shared};
use arl_chat::toolcall::Call;
use arl_core::record::{Record, Status};
use arl_env::arena::game::{self, Board, Game, Outcome};
use serde_json::{json, Value};

pub use arl_env::arena::SEATS;

/// How the arena is set up for a run.
pub struct Arena {
    /// Illegal attempts a seat may retry per move before it forfeits.
    pub retries: u32,
    /// Most response tokens per seat (tool turns included).
    pub max_response_len: u32,
    /// What plays seat 1 (`o`): `self` or the opponent's URL.
    pub opponent: String,
}

/// The game of a task record: `metadata.game` and the optional opening moves
/// `metadata.opening` (a list of move numbers played before the seats start).
pub fn task_game(rec: &Record) -> Result<(Game, Vec<i64>), String> {
    let g = rec.meta("game").ok_or(
        "field `metadata.game`: missing; arena tasks name their game (`tictactoe`, `connect4`), see `arl-tasks arena`",
    )?;
    let name = g.as_str().ok_or("field `metadata.game`: expected a string")?;
    let game = Game::parse(name)
        .ok_or_else(|| format!("field `metadata.game`: unknown game `{name}` (known: tictactoe, connect4)"))?;
    let opening: Vec<i64> = match rec.meta("opening") {
        None | Some(Value::Null) => vec![],
        Some(Value::Array(a)) => a
            .iter()
            .map(|x| x.as_i64().ok_or("field `metadata.opening`: expected a list of move numbers"))
            .collect::<Result<_, _>>()?,
        Some(_) => return Err("field `metadata.opening`: expected a list of move numbers".into()),
    };
    let mut b = Board::new(game);
    for &m in &opening {
        b.play(m).map_err(|e| format!("field `metadata.opening`: {e}"))?;
        if b.outcome().is_some() {
            return Err("field `metadata.opening`: the game is already over after the opening".into());
        }
    }
    Ok((game, opening))
}

/// The user message of a seat at its first move.
pub fn seat_prompt(game: Game, seat: usize, board: &Board, task_prompt: Option<&str>) -> String {
    let mut s = String::new();
    if let Some(p) = task_prompt.filter(|p| !p.trim().is_empty()) {
        s += p.trim();
        s += "\n\n";
    } else {
        s += game.rules();
        s += "\n\n";
    }
    s += &format!(
        "You play {}. Make each move by calling the `move` tool with the {} number; one move per turn.\n\nBoard:\n{}\n{}",
        game::mark(seat),
        game.arg(),
        board.render(),
        turn_line(board, 1)
    );
    s
}

/// `Turn N.` (the move number of the game), or `Turn N, attempt K.` for a retry:
/// a marker that is unique per position, so a scripted server can key on it.
fn turn_line(board: &Board, attempt: u32) -> String {
    let n = board.moves.len() + 1;
    if attempt <= 1 {
        format!("Turn {n}. Your move.")
    } else {
        format!("Turn {n}, attempt {attempt}. Your move.")
    }
}

/// One seat's conversation during a game.
struct Seat {
    ep: Episode,
    started: bool,
    prompt_text: String,
    /// The observation owed before its next generation.
    pending: Option<String>,
    illegal: u32,
    forfeited: bool,
    endpoint: usize,
}

/// What happened in one game.
pub struct GameResult {
    pub episodes: [Episode; 2],
    pub prompts: [String; 2],
    pub outcome: Option<Outcome>,
    /// The seat that forfeited, and why.
    pub forfeit: Option<(usize, String)>,
    pub board: Board,
    pub illegal: [u32; 2],
    /// (seat, move) in order, the opening excluded.
    pub moves: Vec<(usize, i64)>,
}

/// What stays the same through one game.
struct Table<'a> {
    arena: &'a Arena,
    game: Game,
    /// The tool definitions every seat sees: the game's `move`.
    defs: Vec<Value>,
    task_prompt: Option<&'a str>,
    trace: Option<crate::trace::SampleTrace<'a>>,
}

impl Table<'_> {
    /// Seat `s`'s first user message on `board`, and its rendering in `sh`'s
    /// chat template (the `move` tool in the system turn) as token ids.
    fn seat_prompt_ids(&self, sh: &Shared, s: usize, board: &Board) -> Result<(String, Vec<u32>), GenError> {
        let text = seat_prompt(self.game, s, board, self.task_prompt);
        let rendered = match &sh.template {
            Some(t) => {
                sh.render(t, &[json!({"role": "user", "content": text})], Some(&self.defs)).map_err(GenError::Fatal)?
            }
            None => text.clone(),
        };
        let ids = sh.tokenizer.encode(&rendered).map_err(GenError::Fatal)?;
        Ok((text, ids))
    }
}

/// Plays one game. `shared[s]` serves seat `s`; both may be the same.
pub async fn play(
    arena: &Arena,
    shared: [&Shared; 2],
    game: Game,
    opening: &[i64],
    task_prompt: Option<&str>,
    trace: Option<crate::trace::SampleTrace<'_>>,
) -> Result<GameResult, GenError> {
    let mut board = Board::new(game);
    for &m in opening {
        board.play(m).map_err(|e| GenError::Fatal(anyhow::anyhow!("opening: {e}")))?;
    }
    let table = Table { arena, game, defs: vec![game.tool_def()], task_prompt, trace };
    let mut seats: Vec<Seat> = (0..2)
        .map(|s| Seat {
            ep: Episode::default(),
            started: false,
            prompt_text: String::new(),
            pending: None,
            illegal: 0,
            forfeited: false,
            endpoint: shared[s].client.place(),
        })
        .collect();
    let mut moves = Vec::new();
    let mut forfeit = None;
    let res = async {
        let outcome = loop {
            let s = board.to_move();
            let m = match next_move(&table, shared[s], &mut seats, s, &board).await? {
                Ok(m) => m,
                Err(why) => {
                    // Out of tokens, or out of retries: the seat forfeits.
                    forfeit = Some((s, why));
                    seats[s].forfeited = true;
                    break None;
                }
            };
            board.play(m).map_err(|e| GenError::Fatal(anyhow::anyhow!("internal: a checked move failed: {e}")))?;
            moves.push((s, m));
            if let Some(o) = board.outcome() {
                break Some(o);
            }
            // The other seat learns of this move at its turn: its pending
            // observation (if it has moved before) is the reply to its own move.
            let o = 1 - s;
            if seats[o].started {
                let their = moves.iter().rev().find(|(p, _)| *p == o).map(|(_, m)| *m);
                let mut t = String::new();
                if let Some(tm) = their {
                    t += &format!("You played {} {tm}. ", game.arg());
                }
                t += &format!(
                    "{} played {} {m}.\n\nBoard:\n{}\n{}",
                    game::mark(s),
                    game.arg(),
                    board.render(),
                    turn_line(&board, 1)
                );
                seats[o].pending = Some(t);
            }
        };
        Ok::<_, GenError>(outcome)
    }
    .await;
    for (s, seat) in seats.iter().enumerate() {
        shared[s].client.release(seat.endpoint);
    }
    let outcome = res?;
    let mut eps: Vec<Episode> = Vec::with_capacity(2);
    let mut prompts = Vec::with_capacity(2);
    let mut illegal = [0u32; 2];
    for (s, mut seat) in seats.into_iter().enumerate() {
        if seat.ep.status.is_none() {
            seat.ep.status = Some(Status::Completed);
        }
        if !seat.started {
            // The game ended before this seat moved (a forfeit on move one):
            // its record holds the prompt it would have seen and no response.
            let (text, ids) = table.seat_prompt_ids(shared[s], s, &board)?;
            seat.ep.tokens = ids;
            seat.ep.prompt_len = seat.ep.tokens.len();
            seat.prompt_text = text;
            seat.ep.finish_reason = "not_started".into();
        }
        illegal[s] = seat.illegal;
        prompts.push(seat.prompt_text);
        eps.push(seat.ep);
    }
    let e1 = eps.pop().unwrap_or_default();
    let e0 = eps.pop().unwrap_or_default();
    let p1 = prompts.pop().unwrap_or_default();
    let p0 = prompts.pop().unwrap_or_default();
    Ok(GameResult { episodes: [e0, e1], prompts: [p0, p1], outcome, forfeit, board, illegal, moves })
}

/// Seat `s`'s next move on `board`, served by `sh`: the seat's turns until
/// one is legal (each illegal attempt refused with an observation and tried
/// again, at most `retries` times). `Ok(Err(why))` when the seat forfeits
/// instead: out of retries, out of response tokens, or aborted by its server
/// too often.
async fn next_move(
    table: &Table<'_>,
    sh: &Shared,
    seats: &mut [Seat],
    s: usize,
    board: &Board,
) -> Result<Result<i64, String>, GenError> {
    let arena = table.arena;
    let out_of_tokens = || format!("ran out of response tokens (`--max-response-len` {})", arena.max_response_len);
    let mut attempt = 1u32;
    let mut aborts = 0u32;
    loop {
        let seat = &mut seats[s];
        if !seat.started {
            let (text, ids) = table.seat_prompt_ids(sh, s, board)?;
            seat.ep.prompt_len = ids.len();
            seat.ep.tokens = ids;
            seat.prompt_text = text;
            seat.started = true;
        } else if let Some(obs) = seat.pending.take() {
            if !append_observation(sh, &mut seat.ep, &table.defs, &obs, arena.max_response_len as usize)? {
                return Ok(Err(out_of_tokens()));
            }
        }
        let used = seat.ep.tokens.len() - seat.ep.prompt_len;
        if used >= arena.max_response_len as usize {
            seat.ep.status = Some(Status::Truncated);
            return Ok(Err(out_of_tokens()));
        }
        let mut budget = arena.max_response_len - used as u32;
        if let Some(cap) = sh.max_new_tokens {
            budget = budget.min(cap);
        }
        let turn = table.trace.map(|t| t.turn(seats.iter().map(|x| x.ep.turns).sum::<u32>() + 1));
        let seat = &mut seats[s];
        let start = seat.ep.tokens.len();
        let finish = sh.generate_turn(seat.endpoint, &mut seat.ep, budget, turn).await?;
        if finish == "abort" {
            if sh.client.is_cancelled() {
                return Err(GenError::Cancelled);
            }
            // The server aborted on its own (a weight update): continue
            // the same turn, as a partial rollout spanning two versions.
            aborts += 1;
            if aborts > 5 {
                seat.ep.status = Some(Status::Aborted);
                return Ok(Err("the server aborted the turn 6 times".to_string()));
            }
            continue;
        }
        aborts = 0;
        seat.ep.turns += 1;
        let text = sh.tokenizer.decode(&seat.ep.tokens[start..]);
        let calls = sh.parser.parse(&text);
        seat.ep.tool_calls += calls.len() as u32;
        match judge_turn(table.game, board, &calls, &finish) {
            Ok(m) => return Ok(Ok(m)),
            Err(why) => {
                seat.illegal += 1;
                seat.ep.tool_errors += 1;
                if attempt > arena.retries {
                    return Ok(Err(why));
                }
                attempt += 1;
                let left = arena.retries + 2 - attempt;
                seat.pending = Some(format!(
                    "Illegal move: {why}. The move is refused; {left} more illegal attempt{} and you forfeit.\n\nBoard:\n{}\n{}",
                    if left == 1 { "" } else { "s" },
                    board.render(),
                    turn_line(board, attempt)
                ));
            }
        }
    }
}

/// Appends a tool-response turn (loss mask 0); false when it does not fit.
fn append_observation(
    sh: &Shared,
    ep: &mut Episode,
    defs: &[Value],
    obs: &str,
    max_len: usize,
) -> Result<bool, GenError> {
    let Some(template) = &sh.template else { return Ok(false) };
    let mut text = template.tool_turn(Some(defs), &[obs.to_string()]).map_err(GenError::Fatal)?;
    if let Some(eos) = &sh.eos_text {
        if !ep.tokens.last().is_some_and(|t| sh.eos_ids.contains(t)) {
            text.insert_str(0, eos);
        }
    }
    let ids = sh.tokenizer.encode(&text).map_err(GenError::Fatal)?;
    let room = max_len.saturating_sub(ep.tokens.len() - ep.prompt_len);
    let take = ids.len().min(room);
    ep.tokens.extend_from_slice(&ids[..take]);
    ep.loss_mask.extend(std::iter::repeat_n(0u8, take));
    ep.logprobs.extend(std::iter::repeat_n(0f32, take));
    if take < ids.len() {
        ep.status = Some(Status::Truncated);
        return Ok(false);
    }
    Ok(true)
}

/// The move of a turn, or why the turn is an illegal attempt.
fn judge_turn(game: Game, board: &Board, calls: &[Call], finish: &str) -> Result<i64, String> {
    match calls {
        [] if finish == "length" => Err("the turn was cut at the token limit without a `move` call".into()),
        [] => Err("no `move` tool call in the turn".into()),
        [Call::Malformed(why)] => Err(why.clone()),
        [Call::Ok { name, arguments }] => {
            if name != "move" {
                return Err(format!("unknown tool `{name}`; the only tool is `move`"));
            }
            let m = game::move_arg(game, arguments)?;
            board.check(m)?;
            Ok(m)
        }
        _ => Err(format!("{} tool calls in one turn; make exactly one move", calls.len())),
    }
}

/// The two records of a game (seat `x` then `o`), from the task record.
/// `prompt_id` becomes `<task id>:<seat>` (each seat's games form a group),
/// `sample_index` the game's index among the task's `-n` games.
pub fn to_records(
    task: &Record,
    game: Game,
    index: u32,
    r: GameResult,
    arena: &Arena,
    tok: [&arl_chat::tokenizer::Tokenizer; 2],
) -> Vec<Record> {
    let task_id = task.prompt_id.clone().unwrap_or_default();
    let episode_id = format!("{task_id}#{index}");
    let winner = match r.outcome {
        Some(Outcome::Win(p)) => Some(p),
        Some(Outcome::Draw) => None,
        None => r.forfeit.as_ref().map(|(s, _)| 1 - s),
    };
    let reason = match (&r.outcome, &r.forfeit) {
        (Some(Outcome::Win(_)), _) => "line".to_string(),
        (Some(Outcome::Draw), _) => "full_board".to_string(),
        (None, Some(_)) => "forfeit".to_string(),
        (None, None) => "unfinished".to_string(),
    };
    let moves: Vec<Value> = r.moves.iter().map(|(s, m)| json!({"seat": SEATS[*s], "move": m})).collect();
    let opening: Vec<i64> = r.board.moves.iter().take(r.board.moves.len() - r.moves.len()).map(|&m| m as i64).collect();
    let GameResult { episodes, prompts, .. } = r;
    let mut out = Vec::with_capacity(2);
    for (s, (ep, prompt)) in episodes.into_iter().zip(prompts).enumerate() {
        let mut rec = task.clone();
        rec.prompt_id = Some(format!("{task_id}:{}", SEATS[s]));
        rec.sample_index = Some(index);
        rec.data_source = Some(game.name().to_string());
        rec.prompt = Some(prompt);
        rec.response = Some(tok[s].decode(&ep.tokens[ep.prompt_len..]));
        rec.prompt_len = Some(ep.prompt_len as u32);
        rec.loss_mask = Some(ep.loss_mask);
        rec.rollout_log_probs = Some(ep.logprobs);
        rec.status = ep.status;
        rec.finish_reason = Some(ep.finish_reason);
        rec.turns = Some(ep.turns);
        rec.tool_calls = Some(ep.tool_calls);
        if !ep.weight_versions.is_empty() {
            rec.weight_versions = Some(ep.weight_versions);
        }
        rec.tokens = Some(ep.tokens);
        let result = match winner {
            Some(w) if w == s => "win",
            Some(_) => "loss",
            None if reason == "full_board" => "draw",
            None => "unfinished",
        };
        let player = if s == 1 && arena.opponent != "self" { "opponent" } else { "policy" };
        rec.set_meta("episode_id", json!(episode_id));
        rec.set_meta(
            "arena",
            json!({
                "game": game.name(),
                "seat": SEATS[s],
                "mark": game::mark(s).to_string(),
                "player": player,
                "opponent": match (s, arena.opponent.as_str()) {
                    (_, "self") => "self".to_string(),
                    (0, url) => url.to_string(),
                    _ => "policy".to_string(),
                },
                "opponent_prompt_id": format!("{task_id}:{}", SEATS[1 - s]),
                "result": result,
                "winner": winner.map(|w| SEATS[w]),
                "reason": reason,
                "forfeit": r.forfeit.as_ref().map(|(fs, why)| json!({"seat": SEATS[*fs], "why": why})),
                "illegal_moves": r.illegal[s],
                "opening": opening,
                "moves": moves,
                "final_board": r.board.render(),
            }),
        );
        out.push(rec);
    }
    out
}
