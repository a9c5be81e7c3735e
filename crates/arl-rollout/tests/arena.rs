//! Arenas end to end through the real binaries: games played in turn by two
//! seats through `arl-rollout --arena` against `arl-serve` (its `--scripted`
//! TEST DOUBLE for exact moves: a full game with a refused move, and a
//! forfeit by an opponent behind a second server; then the tiny test model
//! playing itself), scored with `arl-reward --rm game`; tournament-ranked
//! rewards (`arl-reward --rm arena`) over answers of known quality with a rule
//! judge, a `cmd` judge and a model judge (scripted `arl-serve` verdicts);
//! `arl-inspect show` on both.
use arl_testkit::common;
use arl_testkit::serve_util;

use common::{jsonl, run_in};
use serde_json::{json, Value};
use std::path::Path;

fn s(p: &Path) -> &str {
    p.to_str().unwrap()
}

fn to_jsonl(v: &[Value]) -> Vec<u8> {
    let mut out = Vec::new();
    for r in v {
        out.extend(r.to_string().bytes());
        out.push(b'\n');
    }
    out
}

fn call(arg: &str, m: i64) -> String {
    format!("<tool_call>\n{{\"name\": \"move\", \"arguments\": {{\"{arg}\": {m}}}}}\n</tool_call>")
}

fn scripted(dir: &Path, name: &str, scripts: &[Value]) -> serve_util::Server {
    let model = dir.join("model");
    if !model.exists() {
        serve_util::scripted_model_dir(&model);
    }
    let file = dir.join(format!("{name}.jsonl"));
    std::fs::write(&file, to_jsonl(scripts)).unwrap();
    serve_util::Server::start(&["--model-path", s(&model), "--scripted", s(&file)])
}

/// Token/mask/log-prob consistency of a trajectory record.
fn well_formed(r: &Value) {
    let pl = r["prompt_len"].as_u64().unwrap() as usize;
    let toks = r["tokens"].as_array().unwrap();
    let mask = r["loss_mask"].as_array().unwrap();
    let lps = r["rollout_log_probs"].as_array().unwrap();
    assert_eq!(toks.len(), pl + mask.len(), "{r}");
    assert_eq!(lps.len(), mask.len());
    for (m, lp) in mask.iter().zip(lps) {
        if m == 0 {
            assert_eq!(lp.as_f64(), Some(0.0));
        }
    }
}

/// The text of the response tokens with the given mask (byte-level tokenizer).
fn masked_text(r: &Value, want: u64) -> String {
    let pl = r["prompt_len"].as_u64().unwrap() as usize;
    let toks = &r["tokens"].as_array().unwrap()[pl..];
    let bytes: Vec<u8> = toks
        .iter()
        .zip(r["loss_mask"].as_array().unwrap())
        .filter(|(t, m)| m.as_u64() == Some(want) && t.as_u64().unwrap() < 256)
        .map(|(t, _)| t.as_u64().unwrap() as u8)
        .collect();
    String::from_utf8_lossy(&bytes).into_owned()
}

/// A scripted tic-tac-toe game: X 1, O tries the taken cell 1 (refused), then
/// O 5, X 2, O 9, X 3 — X wins on the top row; `--resume` on its output. Then
/// an opponent server that never calls `move` forfeits after its retries.
#[test]
fn scripted_games_give_both_seats_records_with_zero_sum_rewards() {
    let d = common::tmpdir();
    let p = d.path();
    run_in(p, "arl-tasks", &["arena", "--game", "tictactoe", "-n", "1", "-o", "tasks.jsonl"], b"").ok();
    let tasks = jsonl(&std::fs::read(p.join("tasks.jsonl")).unwrap());
    assert_eq!(tasks[0]["metadata"]["game"], "tictactoe");
    assert_eq!(tasks[0]["metadata"]["opening"], json!([]));
    let plan =
        [("Turn 1.", 1), ("Turn 2.", 1), ("Turn 2, attempt 2.", 5), ("Turn 3.", 2), ("Turn 4.", 9), ("Turn 5.", 3)];
    let scripts: Vec<Value> = plan
        .iter()
        .map(|(w, m)| json!({"when": w, "completion": format!("I play {m}.\n{}", call("cell", *m))}))
        .collect();
    let policy = scripted(p, "policy", &scripts);
    run_in(
        p,
        "arl-rollout",
        &[
            "-q",
            "--arena",
            "-i",
            "tasks.jsonl",
            "--endpoint",
            &policy.url,
            "--tokenizer",
            "model",
            "--illegal-retries",
            "1",
            "-o",
            "games.jsonl",
        ],
        b"",
    )
    .ok();
    let games = jsonl(&std::fs::read(p.join("games.jsonl")).unwrap());
    assert_eq!(games.len(), 2, "one record per seat");
    let id = tasks[0]["prompt_id"].as_str().unwrap();
    resume_keeps_the_done_task_and_replays_a_torn_one(p, &policy, &games, id);
    let (x, o) = (&games[0], &games[1]);
    assert_eq!(x["prompt_id"], format!("{id}:x"));
    assert_eq!(o["prompt_id"], format!("{id}:o"));
    assert_eq!(x["metadata"]["episode_id"], o["metadata"]["episode_id"]);
    for r in [x, o] {
        well_formed(r);
        assert_eq!(r["status"], "completed");
        assert_eq!(r["sample_index"], 0);
        assert_eq!(r["metadata"]["arena"]["winner"], "x");
        assert_eq!(r["metadata"]["arena"]["reason"], "line");
        assert_eq!(r["metadata"]["arena"]["opponent"], "self");
        let moves: Vec<i64> =
            r["metadata"]["arena"]["moves"].as_array().unwrap().iter().map(|m| m["move"].as_i64().unwrap()).collect();
        assert_eq!(moves, vec![1, 5, 2, 9, 3]);
    }
    assert_eq!(x["metadata"]["arena"]["result"], "win");
    assert_eq!(o["metadata"]["arena"]["result"], "loss");
    assert_eq!(o["metadata"]["arena"]["illegal_moves"], 1);
    assert_eq!(x["turns"], 3);
    assert_eq!(o["turns"], 3, "two moves and one refused attempt");
    // What the environment said is in the untrained tokens only.
    let seen_by_o = masked_text(o, 0);
    assert!(seen_by_o.contains("Illegal move: cell 1 is already taken by X"), "{seen_by_o}");
    assert!(seen_by_o.contains("X played cell 2."), "{seen_by_o}");
    assert!(masked_text(o, 1).contains("\"cell\": 5"));
    assert!(!masked_text(o, 1).contains("Illegal"));
    assert!(masked_text(x, 0).contains("You played cell 1. O played cell 5."));

    let scored = jsonl(&run_in(p, "arl-reward", &["-q", "--rm", "auto", "-i", "games.jsonl"], b"").ok().stdout);
    let rewards: Vec<f64> = scored.iter().map(|r| r["reward"].as_f64().unwrap()).collect();
    assert_eq!(rewards, vec![1.0, -1.0]);
    assert_eq!(scored[0]["reward_detail"]["rm"], "game");
    let scored = jsonl(
        &run_in(
            p,
            "arl-reward",
            &["-q", "--rm", "game", "--game-draw", "0.5", "--game-loss", "0", "-i", "games.jsonl"],
            b"",
        )
        .ok()
        .stdout,
    );
    assert_eq!(scored.iter().map(|r| r["reward"].as_f64().unwrap()).sum::<f64>(), 1.0);

    // arl-inspect show replays the game.
    let shown = run_in(p, "arl-inspect", &["show", "-i", "games.jsonl", "--index", "1"], b"").ok().stdout_str();
    assert!(shown.contains("seat o (O)") && shown.contains("result: LOSS (winner: x by line)"), "{shown}");
    assert!(shown.contains("move 5: x (X) plays cell 3\n    X X X\n    4 O 6\n    7 8 O"), "{shown}");

    an_opponent_that_never_moves_forfeits(p, &policy, id);
}

/// `--resume` on the scripted game's output (`games`, task `id`): the done
/// task is not played again; a torn write that kept one seat's group is.
fn resume_keeps_the_done_task_and_replays_a_torn_one(p: &Path, policy: &serve_util::Server, games: &[Value], id: &str) {
    // --resume knows a task is done when both seats' groups are in the file.
    let again = run_in(
        p,
        "arl-rollout",
        &[
            "--arena",
            "-i",
            "tasks.jsonl",
            "--endpoint",
            &policy.url,
            "--tokenizer",
            "model",
            "--illegal-retries",
            "1",
            "-o",
            "games.jsonl",
            "--resume",
        ],
        b"",
    )
    .ok();
    assert!(
        again.stderr.contains("1 groups written (1 resumed)") && again.stderr.contains("0 requests"),
        "{}",
        again.stderr
    );
    assert_eq!(jsonl(&std::fs::read(p.join("games.jsonl")).unwrap()), games);
    // A torn write that kept only seat x's group: the task is played again, not half-kept.
    std::fs::write(p.join("torn.jsonl.partial"), to_jsonl(&games[..1])).unwrap();
    run_in(
        p,
        "arl-rollout",
        &[
            "-q",
            "--arena",
            "-i",
            "tasks.jsonl",
            "--endpoint",
            &policy.url,
            "--tokenizer",
            "model",
            "--illegal-retries",
            "1",
            "-o",
            "torn.jsonl",
            "--resume",
        ],
        b"",
    )
    .ok();
    let redone = jsonl(&std::fs::read(p.join("torn.jsonl")).unwrap());
    assert_eq!(
        redone.iter().map(|r| r["prompt_id"].as_str().unwrap()).collect::<Vec<_>>(),
        vec![format!("{id}:x"), format!("{id}:o")]
    );
}

/// An opponent behind a second server that never calls `move`: it forfeits
/// every game of task `id`, scored inline and again by `arl-reward`.
fn an_opponent_that_never_moves_forfeits(p: &Path, policy: &serve_util::Server, id: &str) {
    // An opponent behind another server that never calls `move` forfeits
    // after one refused attempt and its retry.
    let opp = scripted(p, "opponent", &[json!({"completion": "I would rather not play."})]);
    run_in(
        p,
        "arl-rollout",
        &[
            "-q",
            "--arena",
            "-i",
            "tasks.jsonl",
            "--endpoint",
            &policy.url,
            "--opponent-endpoint",
            &opp.url,
            "--tokenizer",
            "model",
            "--illegal-retries",
            "1",
            "-n",
            "2",
            "--rm",
            "game",
            "-o",
            "forfeit.jsonl",
        ],
        b"",
    )
    .ok();
    let games = jsonl(&std::fs::read(p.join("forfeit.jsonl")).unwrap());
    assert_eq!(games.len(), 4);
    let ids: Vec<&str> = games.iter().map(|r| r["prompt_id"].as_str().unwrap()).collect();
    assert_eq!(ids, vec![format!("{id}:x"), format!("{id}:x"), format!("{id}:o"), format!("{id}:o")]);
    for r in &games {
        well_formed(r);
        let a = &r["metadata"]["arena"];
        assert_eq!(a["reason"], "forfeit");
        assert_eq!(a["winner"], "x");
        assert_eq!(a["forfeit"]["seat"], "o");
        assert!(a["forfeit"]["why"].as_str().unwrap().contains("no `move` tool call"));
    }
    // Scored inline by `--rm game` with the default values.
    let inline: Vec<f64> = games.iter().map(|r| r["reward"].as_f64().unwrap()).collect();
    assert_eq!(inline, vec![1.0, 1.0, -1.0, -1.0]);
    let o = &games[2];
    assert_eq!(o["metadata"]["arena"]["player"], "opponent");
    assert_eq!(games[0]["metadata"]["arena"]["opponent"], opp.url.as_str());
    assert_eq!(o["metadata"]["arena"]["illegal_moves"], 2);
    assert_eq!(o["turns"], 2);
    assert!(masked_text(o, 0).contains("1 more illegal attempt and you forfeit"));
    let scored = jsonl(
        &run_in(p, "arl-reward", &["-q", "--rm", "game", "--game-forfeit", "-2", "-i", "forfeit.jsonl"], b"")
            .ok()
            .stdout,
    );
    let rewards: Vec<f64> = scored.iter().map(|r| r["reward"].as_f64().unwrap()).collect();
    assert_eq!(rewards, vec![1.0, 1.0, -2.0, -2.0]);
    assert_eq!(scored[2]["reward_detail"]["forfeited"], true);
}

/// The tiny test model plays itself through the real arl-serve: mostly
/// illegal moves, so games end in forfeits; every game still gives two
/// well-formed records whose rewards sum to zero.
#[test]
fn the_tiny_model_plays_itself() {
    let d = common::tmpdir();
    let p = d.path();
    let cfg = Path::new(concat!(env!("CARGO_MANIFEST_DIR"), "/../..")).join("scripts/golden/tiny.json");
    run_in(p, "arl-train", &["make-tokenizer", "--out", "tok"], b"").ok();
    run_in(p, "arl-train", &["init", "--config", s(&cfg), "--tokenizer", "tok", "--out", "m", "--seed", "4"], b"").ok();
    let server = serve_util::Server::start(&["--model-path", s(&p.join("m")), "--cpu-threads", "1"]);
    for game in ["tictactoe", "connect4"] {
        run_in(p, "arl-tasks", &["arena", "--game", game, "-n", "2", "--difficulty", "3", "-o", "t.jsonl"], b"").ok();
        run_in(
            p,
            "arl-rollout",
            &[
                "-q",
                "--arena",
                "-i",
                "t.jsonl",
                "--endpoint",
                &server.url,
                "--tokenizer",
                "m",
                "-n",
                "2",
                "--max-new-tokens",
                "12",
                "--max-response-len",
                "48",
                "--illegal-retries",
                "1",
                "-o",
                "g.jsonl",
            ],
            b"",
        )
        .ok();
        let scored = jsonl(&run_in(p, "arl-reward", &["-q", "--rm", "game", "-i", "g.jsonl"], b"").ok().stdout);
        assert_eq!(scored.len(), 8, "2 tasks × 2 games × 2 seats");
        let mut by_episode: std::collections::BTreeMap<String, Vec<&Value>> = Default::default();
        for r in &scored {
            well_formed(r);
            assert_eq!(r["data_source"], game);
            let st = r["status"].as_str().unwrap();
            assert!(st == "completed" || st == "truncated", "{st}");
            assert_eq!(r["metadata"]["arena"]["opening"].as_array().unwrap().len(), 2);
            by_episode.entry(r["metadata"]["episode_id"].as_str().unwrap().to_string()).or_default().push(r);
        }
        assert_eq!(by_episode.len(), 4);
        for (ep, pair) in by_episode {
            assert_eq!(pair.len(), 2, "{ep}");
            let seats: Vec<&str> = pair.iter().map(|r| r["metadata"]["arena"]["seat"].as_str().unwrap()).collect();
            assert_eq!(seats, vec!["x", "o"]);
            let sum: f64 = pair.iter().map(|r| r["reward"].as_f64().unwrap()).sum();
            assert_eq!(sum, 0.0, "{ep}: a two-player game is zero-sum");
            assert_eq!(pair[0]["metadata"]["arena"]["winner"], pair[1]["metadata"]["arena"]["winner"]);
        }
    }
}

/// Four answers of known quality against the label (token F1: 1, 0.8, 0.5, 0).
fn known_answers() -> Vec<Value> {
    let label = "the quick brown fox jumps";
    // Listed in a shuffled order: quality ranks 2, 0, 3, 1.
    let answers = ["the quick fox", "the quick brown fox jumps", "a slow turtle", "the quick brown fox"];
    let mut recs = Vec::new();
    for (k, a) in answers.iter().enumerate() {
        recs.push(
            json!({"prompt_id": "q1", "sample_index": k, "prompt": "Say the sentence.", "label": label, "response": a}),
        );
    }
    // A second group of five (odd: a bye in elimination), longer is better there.
    for (k, a) in ["aa", "aaaaa", "a", "aaaa", "aaa"].iter().enumerate() {
        recs.push(json!({"prompt_id": "q2", "sample_index": k, "prompt": "Shout.", "label": "aaaaa", "response": a}));
    }
    recs
}

fn rewards_of(v: &[Value], id: &str) -> Vec<f64> {
    v.iter().filter(|r| r["prompt_id"] == id).map(|r| r["reward"].as_f64().unwrap()).collect()
}

#[test]
fn round_robin_and_elimination_rank_known_answers() {
    let d = common::tmpdir();
    let p = d.path();
    let input = to_jsonl(&known_answers());
    // Rule judge: the higher F1 against the label wins.
    let rr = jsonl(
        &run_in(
            p,
            "arl-reward",
            &["-q", "--rm", "arena", "--arena", "round-robin", "--judge", "score", "--judge-rm", "f1"],
            &input,
        )
        .ok()
        .stdout,
    );
    let third = 1.0f64 / 3.0;
    let got = rewards_of(&rr, "q1");
    let want = [third, 1.0, 0.0, 2.0 * third];
    for (g, w) in got.iter().zip(want) {
        assert!((g - w).abs() < 1e-6, "{got:?}");
    }
    assert_eq!(rr[1]["reward_detail"]["rank"], 1);
    assert_eq!(rr[1]["reward_detail"]["ranking"], json!([1, 3, 0, 2]));
    assert_eq!(rr[1]["reward_detail"]["matches"].as_array().unwrap().len(), 3);
    // q2: only "aaaaa" matches the label; the other four tie among themselves.
    assert_eq!(rewards_of(&rr, "q2"), vec![0.375, 1.0, 0.375, 0.375, 0.375]);

    let el = jsonl(
        &run_in(p, "arl-reward", &["-q", "--rm", "arena", "--arena", "elimination", "--judge", "longer"], &input)
            .ok()
            .stdout,
    );
    // q1 by length: 1 v 0 → 1 (25 chars > 13), 2 v 3 → 3; final 1 v 3 → 1.
    assert_eq!(rewards_of(&el, "q1"), vec![0.0, 1.0, 0.0, 0.5]);
    // q2 (five, 3 rounds): 0 v 1 → 1, 2 v 3 → 3, 4 bye; 1 v 3 → 1, 4 bye; final 1 v 4 → 1.
    let q2 = rewards_of(&el, "q2");
    let want = [0.0, 1.0, 0.0, 1.0 / 3.0, 2.0 / 3.0];
    for (g, w) in q2.iter().zip(want) {
        assert!((g - w).abs() < 1e-6, "{q2:?}");
    }
    let champion = el.iter().find(|r| r["prompt_id"] == "q2" && r["sample_index"] == 4).unwrap();
    assert_eq!(champion["reward_detail"]["byes"], 2);
    assert_eq!(champion["reward_detail"]["rounds"], 3);

    // A cmd judge with a known order: the response with more words wins,
    // answered as "a"/"b"/"tie" one line per match.
    let judge = p.join("judge.py");
    std::fs::write(
        &judge,
        "import sys, json\nwhile True:\n    l = sys.stdin.readline()\n    if not l:\n        break\n    q = json.loads(l)\n    a, b = len(q['a'].split()), len(q['b'].split())\n    print(json.dumps('a' if a > b else 'b' if b > a else 'tie'), flush=True)\n",
    )
    .unwrap();
    let cmd = format!("python3 {}", s(&judge));
    let out = jsonl(
        &run_in(
            p,
            "arl-reward",
            &["-q", "--rm", "arena", "--arena", "round-robin", "--judge", "cmd", "--judge-cmd", &cmd],
            &input,
        )
        .ok()
        .stdout,
    );
    // q1 word counts 3, 5, 3, 4: samples 0 and 2 tie with each other.
    let got = rewards_of(&out, "q1");
    for (g, w) in got.iter().zip([0.5 * third, 1.0, 0.5 * third, 2.0 * third]) {
        assert!((g - w).abs() < 1e-6, "{got:?}");
    }
    // q2's answers are one word each: all ties, 0.5 for everyone.
    assert_eq!(rewards_of(&out, "q2"), vec![0.5; 5]);
    assert_eq!(out[0]["reward_detail"]["matches"][0]["judge"], "b");

    // A group of one has nobody to meet: bad data.
    let lone = to_jsonl(&[json!({"prompt_id": "z", "sample_index": 0, "prompt": "p", "response": "r"})]);
    let r = run_in(p, "arl-reward", &["-q", "--rm", "arena", "--judge", "longer"], &lone);
    assert_eq!(r.code, 65, "{}", r.stderr);
    assert!(r.stderr.contains("at least two"), "{}", r.stderr);

    // arl-inspect show renders the ranking and the matches.
    std::fs::write(p.join("el.jsonl"), to_jsonl(&el)).unwrap();
    let shown = run_in(p, "arl-inspect", &["show", "-i", "el.jsonl", "--index", "1"], b"").ok().stdout_str();
    assert!(shown.contains("elimination tournament, judge longer: rank 1 of 4"), "{shown}");
    assert!(shown.contains("ranking (sample indices, best first): 1 > 3 > 0 > 2"), "{shown}");
    assert!(shown.contains("round 2: 1 vs 3: 1 wins"), "{shown}");
}

/// A model judge behind arl-serve's OpenAI endpoint (scripted verdicts, one
/// per ordered pair; one reply has no verdict and counts as a tie).
#[test]
fn a_model_judge_gives_the_scripted_verdicts() {
    let d = common::tmpdir();
    let p = d.path();
    let answers = ["gamma", "alpha", "beta"];
    let verdict = |a: &str, b: &str, reply: &str| json!({"when": format!("[Answer A]\n{a}\n\n[Answer B]\n{b}"), "completion": reply});
    let judge = scripted(
        p,
        "judge",
        &[
            verdict("gamma", "alpha", "Answer B is better. [[B]]"),
            verdict("gamma", "beta", "[[A]] looks wrong; final verdict: [[B]]"),
            verdict("alpha", "beta", "I cannot decide."),
        ],
    );
    let recs: Vec<Value> = answers
        .iter()
        .enumerate()
        .map(|(k, a)| json!({"prompt_id": "q", "sample_index": k, "prompt": "Name a letter.", "response": a}))
        .collect();
    let out = jsonl(
        &run_in(
            p,
            "arl-reward",
            &["-q", "--rm", "arena", "--judge", "model", "--judge-url", &judge.url],
            &to_jsonl(&recs),
        )
        .ok()
        .stdout,
    );
    let got: Vec<f64> = out.iter().map(|r| r["reward"].as_f64().unwrap()).collect();
    assert_eq!(got, vec![0.0, 0.75, 0.75]);
    let m = &out[1]["reward_detail"]["matches"];
    assert_eq!(m[0]["winner"], "b");
    assert_eq!(m[0]["judge"]["reply"], "Answer B is better. [[B]]");
    assert_eq!(m[1]["winner"], "tie");
    assert!(m[1]["error"].as_str().unwrap().contains("I cannot decide."), "{m}");
    // --judge-strict: the unreadable verdict fails the run.
    let r = run_in(
        p,
        "arl-reward",
        &["-q", "--rm", "arena", "--judge", "model", "--judge-url", &judge.url, "--judge-strict"],
        &to_jsonl(&recs),
    );
    assert_eq!(r.code, 1, "{}", r.stderr);
    assert!(r.stderr.contains("judge failed on samples 1 and 2"), "{}", r.stderr);
}
