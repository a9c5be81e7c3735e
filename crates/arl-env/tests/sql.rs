//! The SQL environment through the real binaries: `arl-tasks sql` →
//! `arl-reward --rm sql` on SQLite and on a real PostgreSQL server
//! (`pg_util`), reference solutions score 1 and wrong ones 0 with a reason,
//! hostile queries are contained and score 0, and the `sql` tool in
//! `arl-rollout` answers from the episode's own database.
use arl_testkit::common;
use arl_testkit::pg_util;

use common::{jsonl, run, run_in};
use serde_json::{json, Value};
use std::time::Instant;

fn tasks(n: &str, level: &str, seed: &str) -> Vec<Value> {
    let out =
        run("arl-tasks", &["sql", "-n", n, "--difficulty", level, "--seed", seed, "--with-solutions", "-q"], b"").ok();
    jsonl(&out.stdout)
}

fn to_jsonl(recs: &[Value]) -> Vec<u8> {
    recs.iter().map(|r| format!("{r}\n")).collect::<String>().into_bytes()
}

fn score(recs: &[Value], extra: &[&str]) -> Vec<Value> {
    let mut args = vec!["--rm", "sql", "-q"];
    args.extend_from_slice(extra);
    jsonl(&run("arl-reward", &args, &to_jsonl(recs)).ok().stdout)
}

/// A wrong answer for each gold query: drop its WHERE clause or its order,
/// or ask another table.
fn wrong(gold: &str) -> String {
    if let Some(i) = gold.find(" WHERE ") {
        let end = gold[i..].find(" ORDER BY ").map_or(gold.len(), |j| i + j);
        return format!("{}{}", &gold[..i], &gold[end..]);
    }
    if let Some(i) = gold.find(" ORDER BY ") {
        return format!("{} ORDER BY 2 ASC, 1 DESC", &gold[..i]);
    }
    "SELECT name FROM products".into()
}

fn check_solutions_and_wrong(extra: &[&str]) {
    let recs = tasks("40", "10", "7");
    assert_eq!(recs.len(), 40);
    let kinds: std::collections::BTreeSet<&str> =
        recs.iter().map(|r| r["metadata"]["kind"].as_str().unwrap()).collect();
    assert!(kinds.len() >= 6, "question kinds {kinds:?}");
    let scored = score(&recs, extra);
    for r in &scored {
        assert_eq!(r["reward"], 1.0, "reference solution: {}", r["reward_detail"]);
        assert_eq!(r["reward_detail"]["match"], true);
    }
    // Wrong answers: 0, and the reason says what differs.
    let mut bad = recs.clone();
    let mut changed = 0;
    for r in bad.iter_mut() {
        let gold = r["label"]["gold"].as_str().unwrap().to_string();
        let w = wrong(&gold);
        r["response"] = json!(format!("```sql\n{w}\n```"));
        changed += 1;
    }
    let scored = score(&bad, extra);
    let mut zeros = 0;
    for r in &scored {
        let d = &r["reward_detail"];
        if r["reward"] == 0.0 {
            zeros += 1;
            assert_eq!(d["match"], false);
            let why = d["reason"].as_str().unwrap();
            assert!(why.contains("rows") || why.contains("column") || why.contains("order"), "{why}");
        }
    }
    // A dropped WHERE can happen to select the same rows; nearly all must differ.
    assert!(zeros * 10 >= changed * 8, "{zeros} of {changed} wrong answers scored 0");
}

#[test]
fn sqlite_reference_solutions_score_one_wrong_ones_zero() {
    check_solutions_and_wrong(&[]);
    // The answer may also be the last `sql` tool call, and `--rm auto` routes `sql`.
    let mut recs = tasks("3", "4", "1");
    for r in recs.iter_mut() {
        let gold = r["label"]["gold"].as_str().unwrap();
        r["response"] = json!(format!(
            "<tool_call>\n{}\n</tool_call>The query above answers it.",
            json!({"name": "sql", "arguments": {"query": gold}})
        ));
    }
    let out = jsonl(&run("arl-reward", &["--rm", "auto", "-q"], &to_jsonl(&recs)).ok().stdout);
    for r in &out {
        assert_eq!(r["reward"], 1.0, "{}", r["reward_detail"]);
        assert_eq!(r["reward_detail"]["query_from"], "tool call");
    }
    // No query at all: 0 with a reason.
    recs[0]["response"] = json!("I do not know.");
    let out = score(&recs[..1], &[]);
    assert_eq!(out[0]["reward"], 0.0);
    assert!(out[0]["reward_detail"]["reason"].as_str().unwrap().contains("no SQL query"));
}

#[test]
fn order_matters_only_when_the_gold_query_orders() {
    let mut recs = tasks("60", "10", "3");
    recs.retain(|r| r["label"]["gold"].as_str().unwrap().contains("GROUP BY city"));
    let mut r = recs.pop().expect("a group-by-city task in 60");
    // Unordered gold: any order of the same rows matches.
    r["response"] = json!("```sql\nSELECT city, COUNT(*) FROM customers GROUP BY city ORDER BY city DESC\n```");
    let out = score(&[r.clone()], &[]);
    assert_eq!(out[0]["reward"], 1.0, "{}", out[0]["reward_detail"]);
    // Ordered gold: the reversed order is the right rows in the wrong order.
    r["label"] = json!({"gold": "SELECT city, COUNT(*) FROM customers GROUP BY city ORDER BY city"});
    let out = score(&[r], &[]);
    assert_eq!(out[0]["reward"], 0.0);
    assert!(out[0]["reward_detail"]["reason"].as_str().unwrap().contains("wrong order"), "{}", out[0]["reward_detail"]);
}

/// Hostile queries, each with the outcome it must get.
fn hostile(dir: &std::path::Path, postgres: bool) -> Vec<(String, &'static str)> {
    let secret = dir.join("secret.db");
    let mut v = vec![
        ("DROP TABLE orders".to_string(), "denied"),
        ("DELETE FROM customers".into(), "denied"),
        ("INSERT INTO products (id, name, category, price) VALUES (99, 'x', 'y', 1)".into(), "denied"),
        ("UPDATE products SET price = 0".into(), "denied"),
        ("CREATE TABLE t (x INTEGER)".into(), "denied"),
        // A cross join far too big to finish, and a recursive CTE that never ends.
        ("SELECT COUNT(*) FROM orders a, orders b, orders c, orders d, orders e, orders f".into(), "timeout"),
        ("WITH RECURSIVE r(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM r) SELECT COUNT(*) FROM r".into(), "timeout"),
    ];
    if postgres {
        v.extend([
            ("DROP SCHEMA public CASCADE".to_string(), "denied"),
            ("SELECT pg_sleep(30)".into(), "timeout"),
            ("SELECT pg_read_file('/etc/passwd')".into(), "denied"),
            ("COPY customers FROM '/etc/passwd'".into(), "denied"),
            ("CREATE TEMP TABLE t AS SELECT 1".into(), "denied"),
            ("SELECT * FROM pg_authid".into(), "denied"),
        ]);
    } else {
        v.extend([
            (format!("ATTACH DATABASE '{}' AS other", secret.display()), "denied"),
            ("PRAGMA query_only = 0".into(), "denied"),
            ("SELECT load_extension('/lib/x86_64-linux-gnu/libc.so.6')".into(), "denied"),
            ("SELECT length(zeroblob(2000000000))".into(), "denied"),
            ("SELECT 1; DROP TABLE orders".into(), "denied"),
        ]);
    }
    v
}

fn check_hostile(extra: &[&str], postgres: bool) {
    let d = common::tmpdir();
    let base = tasks("1", "10", "5").remove(0);
    let cases = hostile(d.path(), postgres);
    let recs: Vec<Value> = cases
        .iter()
        .map(|(q, _)| {
            let mut r = base.clone();
            r["response"] = json!(format!("```sql\n{q}\n```"));
            r
        })
        .collect();
    let mut args = vec!["--sql-timeout", "1"];
    args.extend_from_slice(extra);
    let t0 = Instant::now();
    let out = score(&recs, &args);
    assert!(t0.elapsed().as_secs() < 60, "hostile queries took {:?}", t0.elapsed());
    assert_eq!(out.len(), cases.len());
    for (r, (q, want)) in out.iter().zip(&cases) {
        let det = &r["reward_detail"];
        assert_eq!(r["reward"], 0.0, "{q}: {det}");
        assert_eq!(det["outcome"], *want, "{q}: {det}");
        assert!(det["reason"].as_str().unwrap().starts_with("the query failed"), "{q}: {det}");
    }
    assert!(!d.path().join("secret.db").exists(), "ATTACH created a file");
    // The database is intact afterwards: the reference solution still scores 1.
    let out = score(&[base], extra);
    assert_eq!(out[0]["reward"], 1.0);
}

#[test]
fn sqlite_hostile_queries_are_contained() {
    check_hostile(&[], false);
}

#[test]
fn postgres_same_task_set_and_hostile_queries() {
    let pg = pg_util::Postgres::start();
    let url = pg.admin_url.clone();
    check_solutions_and_wrong(&["--sql-url", &url]);
    check_hostile(&["--sql-url", &url], true);
    // The `sql` tool in rollout on PostgreSQL: the same rows as the SQLite demonstrations.
    let d = common::tmpdir();
    serve_scripted_sql(d.path(), &["--sql-url", &url]);
    // Every episode schema and role was dropped afterwards; other schemas untouched.
    let mut c = pg.client();
    let left: i64 = c.query_one("SELECT COUNT(*) FROM pg_namespace WHERE nspname LIKE 'arl_ep_%'", &[]).unwrap().get(0);
    assert_eq!(left, 0, "episode schemas left behind");
    let roles: i64 = c.query_one("SELECT COUNT(*) FROM pg_roles WHERE rolname LIKE 'arl_ep_%'", &[]).unwrap().get(0);
    assert_eq!(roles, 0, "episode roles left behind");
    let public: i64 = c.query_one("SELECT COUNT(*) FROM pg_namespace WHERE nspname = 'public'", &[]).unwrap().get(0);
    assert_eq!(public, 1);
}

#[test]
fn postgres_episode_cannot_see_another_episodes_schema() {
    let pg = pg_util::Postgres::start();
    let task = arl_env::sql::TaskDb {
        setup: "CREATE TABLE secret (x INTEGER); INSERT INTO secret VALUES (42);".into(),
        writable: false,
    };
    let limits = arl_env::sql::Limits::default();
    let backend = arl_env::sql::Backend::Postgres(pg.admin_url.clone());
    let mut a = arl_env::sql::Db::open(&backend, &task, limits).unwrap();
    let mut b = arl_env::sql::Db::open(&backend, &task, limits).unwrap();
    assert_eq!(a.query("SELECT x FROM secret").unwrap().rows.len(), 1);
    let other: String = {
        let mut c = pg.client();
        let rows =
            c.query("SELECT nspname FROM pg_namespace WHERE nspname LIKE 'arl_ep_%' ORDER BY nspname", &[]).unwrap();
        assert_eq!(rows.len(), 2);
        rows.iter()
            .map(|r| r.get::<_, String>(0))
            .find(|n| a.query(&format!("SELECT x FROM {n}.secret")).is_err())
            .expect("b's schema")
    };
    let e = a.query(&format!("SELECT x FROM {other}.secret")).unwrap_err();
    assert!(matches!(e, arl_env::sql::QueryError::Denied(_)), "{e}");
    let e = a.query(&format!("DROP SCHEMA {other} CASCADE")).unwrap_err();
    assert!(matches!(e, arl_env::sql::QueryError::Denied(_)), "{e}");
    assert_eq!(b.query("SELECT x FROM secret").unwrap().rows.len(), 1, "b's data survives");
    // `SET statement_timeout` by the episode does not lift the limit.
    let limits = arl_env::sql::Limits { timeout: std::time::Duration::from_millis(500), max_rows: 10 };
    let mut c = arl_env::sql::Db::open(&backend, &task, limits).unwrap();
    let t0 = Instant::now();
    let e = c.query("SELECT set_config('statement_timeout', '0', false), pg_sleep(20)").unwrap_err();
    assert!(matches!(e, arl_env::sql::QueryError::Timeout(_)), "{e}");
    assert!(t0.elapsed().as_secs() < 5);
    // Rows are capped.
    let t = c.query("SELECT g FROM generate_series(1, 100000) g").unwrap();
    assert_eq!(t.rows.len(), 10);
    assert!(t.truncated);
}

#[test]
fn sql_tool_in_rollout_answers_from_the_episode_database() {
    // A scripted arl-serve: the first turn calls `sql`, the next answers.
    let d = common::tmpdir();
    serve_scripted_sql(d.path(), &[]);
}

use arl_testkit::serve_util;

/// tasks → arl-rollout (`--tools sql`, scripted arl-serve calling the tool
/// with each task's gold query) → arl-reward: every episode scores 1, the
/// tool turns are masked, and the tool output is the episode database's rows.
fn serve_scripted_sql(p: &std::path::Path, sql_url: &[&str]) {
    serve_util::scripted_model_dir(&p.join("model"));
    let recs = tasks("4", "3", "11");
    std::fs::write(p.join("tasks.jsonl"), to_jsonl(&recs)).unwrap();
    let mut scripts = Vec::new();
    for r in &recs {
        let msgs = r["messages"].as_array().unwrap();
        let q = r["prompt"].as_str().unwrap();
        let question = &q[q.find("Question: ").unwrap()..q.find("\n\nUse the").unwrap()];
        scripts.push(json!({"when": question, "completion": msgs[1]["content"]}).to_string());
    }
    scripts
        .push(json!({"when": "</tool_response>", "completion": "The query above answers the question."}).to_string());
    std::fs::write(p.join("script.jsonl"), scripts.join("\n")).unwrap();
    let server = serve_util::Server::start(&[
        "--model-path",
        p.join("model").to_str().unwrap(),
        "--scripted",
        p.join("script.jsonl").to_str().unwrap(),
    ]);
    let mut args = vec![
        "-q",
        "-i",
        "tasks.jsonl",
        "--endpoint",
        &server.url,
        "--tokenizer",
        "model",
        "--tools",
        "sql",
        "--max-turns",
        "3",
        "-n",
        "2",
        "-o",
        "roll.jsonl",
    ];
    args.extend_from_slice(sql_url);
    let out = run_in(p, "arl-rollout", &args, b"").ok();
    drop(out);
    let rolled = jsonl(&std::fs::read(p.join("roll.jsonl")).unwrap());
    assert_eq!(rolled.len(), 8);
    for r in &rolled {
        assert_eq!(r["tool_calls"], 1, "{r}");
        assert_eq!(r["metadata"]["tool_errors"], 0, "{}", r["response"]);
        let resp = r["response"].as_str().unwrap();
        // The tool answered with the rows the demonstration shows (same database, same query);
        // on PostgreSQL the column names and number formats differ, the row count does not.
        let demo = r["messages"][2]["content"].as_str().unwrap();
        let rows = if sql_url.is_empty() { demo } else { demo.lines().last().unwrap() };
        assert!(resp.contains(rows), "tool output {resp:?} lacks {rows:?}");
        check_masks(r, rows);
    }
    let scored = score(&rolled, sql_url);
    for r in &scored {
        assert_eq!(r["reward"], 1.0, "{}", r["reward_detail"]);
    }
}

/// Mask 0 exactly on the tool turn: the decoded mask-0 tokens hold the tool output.
fn check_masks(r: &Value, rows: &str) {
    let mask: Vec<u64> = r["loss_mask"].as_array().unwrap().iter().map(|x| x.as_u64().unwrap()).collect();
    let toks: Vec<u64> = r["tokens"].as_array().unwrap().iter().map(|x| x.as_u64().unwrap()).collect();
    let pl = r["prompt_len"].as_u64().unwrap() as usize;
    assert_eq!(mask.len(), toks.len() - pl);
    let zeros: Vec<u8> =
        toks[pl..].iter().zip(&mask).filter(|(t, m)| **m == 0 && **t < 256).map(|(t, _)| *t as u8).collect();
    let text = String::from_utf8_lossy(&zeros);
    assert!(text.contains(rows), "masked text {text:?}");
    assert!(mask.iter().filter(|m| **m == 1).count() > 0);
    let lps = r["rollout_log_probs"].as_array().unwrap();
    for (m, lp) in mask.iter().zip(lps) {
        if *m == 0 {
            assert_eq!(lp.as_f64(), Some(0.0));
        }
    }
}
