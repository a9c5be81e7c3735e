//! `arl-reward --rm code` on the sandbox's fallback (bare namespaces, as when
//! bubblewrap is missing, forced with `ARL_SANDBOX_NO_BWRAP=1`): the warning
//! on stderr once, `reward_detail.sandbox` saying degraded, `--sandbox
//! strict` refusing, and Landlock keeping the code away from host files on a
//! kernel that has it.
use arl_env::sandbox::local::{bwrap_unusable, landlock_abi};
use arl_testkit::common::{jsonl, run_in_env, tmpdir};
use serde_json::{json, Value};
use std::os::unix::fs::PermissionsExt;
use std::path::Path;

const WARNING: &str = "the code sandbox runs without bubblewrap";

fn lines(recs: &[Value]) -> Vec<u8> {
    recs.iter().flat_map(|r| format!("{r}\n").into_bytes()).collect()
}

fn rec(id: &str, code: &str, stdout: &str) -> Value {
    json!({"prompt_id": id, "sample_index": 0, "data_source": "code",
           "response": format!("```python\n{code}\n```"),
           "label": {"cases": [{"stdin": "", "stdout": stdout}]}})
}

/// Records whose programs print `contained` only when every escape failed.
fn escapes(dir: &Path) -> Vec<Value> {
    let secret = dir.join("secret.txt");
    let pwned = dir.join("pwned");
    let check = |what: &str| format!("try:\n    {what}\n    print('ESCAPED')\nexcept OSError:\n    print('contained')");
    vec![
        rec("sq", "print(sum(i * i for i in range(4)))", "14"),
        rec("read-secret", &check(&format!("open('{}').read()", secret.display())), "contained"),
        rec("write-outside", &check(&format!("open('{}', 'w').write('x')", pwned.display())), "contained"),
        rec("proc", &check("open('/proc/1/environ').read()"), "contained"),
    ]
}

/// A scratch directory of the test with a world-readable secret in it.
fn planted() -> impl AsRef<Path> {
    let d = tmpdir();
    std::fs::set_permissions(d.path(), std::fs::Permissions::from_mode(0o777)).unwrap();
    let secret = d.path().join("secret.txt");
    std::fs::write(&secret, "REWARD-SANDBOX-SECRET").unwrap();
    std::fs::set_permissions(&secret, std::fs::Permissions::from_mode(0o644)).unwrap();
    d
}

#[test]
fn fallback_warns_once_reports_degraded_and_landlock_denies_host_files() {
    let d = planted();
    let d = d.as_ref();
    let recs = escapes(d);
    let out = run_in_env(
        d,
        "arl-reward",
        &["--rm", "code", "--concurrency", "4", "--test-timeout", "5"],
        &lines(&recs),
        &[("ARL_SANDBOX_NO_BWRAP", "1")],
    )
    .ok();
    // Four sandbox runs, one warning, naming what is missing.
    assert_eq!(out.stderr.matches(WARNING).count(), 1, "{}", out.stderr);
    for what in ["ARL_SANDBOX_NO_BWRAP is set", "no pid namespace", "no private root filesystem"] {
        assert!(out.stderr.contains(what), "{what}: {}", out.stderr);
    }
    let v = jsonl(&out.stdout);
    assert_eq!(v.len(), 4);
    for r in &v {
        let s = &r["reward_detail"]["sandbox"];
        assert_eq!(s["isolation"], "namespaces", "{s}");
        assert_eq!(s["degraded"], true, "{s}");
        assert!(s["missing"].as_array().unwrap().contains(&json!("pid namespace")), "{s}");
    }
    assert_eq!(v[0]["reward"], 1.0, "{}", v[0]["reward_detail"]);
    let s = &v[0]["reward_detail"]["sandbox"];
    assert!(!out.stdout_str().contains("REWARD-SANDBOX-SECRET"));
    match landlock_abi() {
        Ok(abi) => {
            assert!(out.stderr.contains(&format!("Landlock (ABI {abi})")), "{}", out.stderr);
            assert_eq!(s["landlock"]["enforced"], true, "{s}");
            assert_eq!(s["landlock"]["abi"], abi, "{s}");
            if abi >= 6 {
                assert_eq!(s["landlock"]["scopes"], json!(["signal", "abstract_unix_socket"]), "{s}");
            }
            for r in &v[1..] {
                assert_eq!(r["reward"], 1.0, "{}: {}", r["prompt_id"], r["reward_detail"]);
            }
            assert!(!d.join("pwned").exists());
        }
        Err(why) => {
            eprintln!("this kernel has no Landlock ({why}): checking that records say it is not enforced");
            assert_eq!(s["landlock"]["enforced"], false, "{s}");
            assert!(out.stderr.contains("No Landlock"), "{}", out.stderr);
        }
    }
}

#[test]
fn strict_refuses_the_fallback_before_reading_anything() {
    let d = planted();
    let d = d.as_ref();
    let out_file = d.join("out.jsonl");
    let r = run_in_env(
        d,
        "arl-reward",
        &["--rm", "code", "--sandbox", "strict", "-o", out_file.to_str().unwrap()],
        &lines(&escapes(d)),
        &[("ARL_SANDBOX_NO_BWRAP", "1")],
    );
    assert_eq!(r.code, 1, "{}", r.stderr);
    assert!(r.stderr.contains("`--sandbox strict`: refusing"), "{}", r.stderr);
    assert!(r.stderr.contains("no pid namespace") && r.stderr.contains("install bubblewrap"), "{}", r.stderr);
    assert!(!r.stderr.contains(WARNING), "no sandbox ran: {}", r.stderr);
    assert!(!out_file.exists());
    // The same through the environment, and under `--rm auto` (which may route to code).
    let r = run_in_env(
        d,
        "arl-reward",
        &["--rm", "auto"],
        &lines(&escapes(d)),
        &[("ARL_SANDBOX_NO_BWRAP", "1"), ("ARL_SANDBOX", "strict")],
    );
    assert_eq!(r.code, 1, "{}", r.stderr);
    // `namespaces` is for the local sandbox only.
    let r = run_in_env(
        d,
        "arl-reward",
        &["--rm", "code", "--sandbox", "namespaces", "--sandbox-fusion-url", "http://127.0.0.1:9"],
        b"",
        &[],
    );
    assert_eq!(r.code, 2, "{}", r.stderr);
}

#[test]
fn full_sandbox_is_reported_and_namespaces_can_be_chosen() {
    let d = planted();
    let d = d.as_ref();
    let recs = vec![rec("sq", "print(14)", "14")];
    if let Some(why) = bwrap_unusable() {
        eprintln!("bubblewrap is unusable here ({why}): only `--sandbox namespaces` is checked");
    } else {
        for args in [&["--rm", "code"][..], &["--rm", "code", "--sandbox", "strict"]] {
            let out = run_in_env(d, "arl-reward", args, &lines(&recs), &[]).ok();
            assert!(!out.stderr.contains(WARNING), "{}", out.stderr);
            let v = jsonl(&out.stdout);
            assert_eq!(v[0]["reward_detail"]["sandbox"], json!({"isolation": "bwrap"}));
            assert_eq!(v[0]["reward"], 1.0);
        }
    }
    let out = run_in_env(
        d,
        "arl-reward",
        &["--rm", "code", "--sandbox", "namespaces"],
        &lines(&recs),
        &[("ARL_SANDBOX_NO_LANDLOCK", "1")],
    )
    .ok();
    assert_eq!(out.stderr.matches(WARNING).count(), 1, "{}", out.stderr);
    assert!(out.stderr.contains("the fallback was asked for"), "{}", out.stderr);
    assert!(out.stderr.contains("No Landlock"), "{}", out.stderr);
    let v = jsonl(&out.stdout);
    assert_eq!(v[0]["reward"], 1.0);
    let s = &v[0]["reward_detail"]["sandbox"];
    assert_eq!(s["isolation"], "namespaces");
    assert_eq!(s["landlock"], json!({"enforced": false, "why": "ARL_SANDBOX_NO_LANDLOCK is set"}));
}
