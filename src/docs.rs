//! Man pages and shell completions generated from the clap definitions, so
//! `--help`, `man/` and `completions/` never disagree. `arl-docs` writes them;
//! a test fails when the checked-in copies are stale.
use anyhow::{Context, Result};
use std::collections::BTreeMap;
use std::path::Path;

/// Renders the man pages: one per binary and one per subcommand
/// (`arl-inspect-stats.1`), keyed by file name.
pub fn man_pages() -> Result<BTreeMap<String, Vec<u8>>> {
    let mut out = BTreeMap::new();
    for cmd in crate::cmd::all() {
        render_tree(cmd, &mut out)?;
    }
    Ok(out)
}

fn render_tree(cmd: clap::Command, out: &mut BTreeMap<String, Vec<u8>>) -> Result<()> {
    let name = cmd.get_name().to_string();
    let mut buf = Vec::new();
    // No date in the page: regenerating must be reproducible.
    clap_mangen::Man::new(cmd.clone()).date("").render(&mut buf).context("rendering man page")?;
    out.insert(format!("{name}.1"), buf);
    for sub in cmd.get_subcommands() {
        if sub.get_name() == "help" {
            continue;
        }
        let full = format!("{name}-{}", sub.get_name());
        let version = cmd.get_version().unwrap_or_default().to_string();
        let sub = sub.clone().name(full.clone()).version(version);
        render_tree(sub, out)?;
    }
    Ok(())
}

/// Renders bash, zsh and fish completions, keyed by relative path.
pub fn completions() -> BTreeMap<String, Vec<u8>> {
    use clap_complete::{generate, Shell};
    let mut out = BTreeMap::new();
    for mut cmd in crate::cmd::all() {
        let name = cmd.get_name().to_string();
        for (shell, path) in [
            (Shell::Bash, format!("bash/{name}")),
            (Shell::Zsh, format!("zsh/_{name}")),
            (Shell::Fish, format!("fish/{name}.fish")),
        ] {
            let mut buf = Vec::new();
            generate(shell, &mut cmd, name.clone(), &mut buf);
            out.insert(path, buf);
        }
    }
    out
}

/// Writes every generated file under `root` (`man/` and `completions/`).
pub fn write(root: &Path) -> Result<usize> {
    let mut n = 0;
    for (dir, files) in [("man", man_pages()?), ("completions", completions())] {
        for (rel, bytes) in files {
            let p = root.join(dir).join(rel);
            if let Some(parent) = p.parent() {
                std::fs::create_dir_all(parent)?;
            }
            if std::fs::read(&p).ok().as_deref() != Some(&bytes[..]) {
                std::fs::write(&p, &bytes).with_context(|| format!("cannot write `{}`", p.display()))?;
                n += 1;
            }
        }
    }
    Ok(n)
}

/// Lists the generated files that are missing or differ under `root`.
pub fn stale(root: &Path) -> Result<Vec<String>> {
    let mut bad = Vec::new();
    for (dir, files) in [("man", man_pages()?), ("completions", completions())] {
        for (rel, bytes) in files {
            let p = root.join(dir).join(&rel);
            if std::fs::read(&p).ok().as_deref() != Some(&bytes[..]) {
                bad.push(format!("{dir}/{rel}"));
            }
        }
    }
    Ok(bad)
}
