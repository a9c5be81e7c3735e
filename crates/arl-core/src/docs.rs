//! Man pages and shell completions generated from the clap definitions, so
//! `--help`, `man/` and `completions/` never disagree. Every binary writes its
//! own with the hidden first argument `--generate-docs DIR` (`make docs` runs
//! them all, for the repository's `man/` and `completions/`); a test fails
//! when the checked-in copies are stale.
use anyhow::{Context, Result};
use std::collections::BTreeMap;
use std::path::Path;

/// Renders the man pages of one binary: one for it and one per subcommand
/// (`arl-inspect-stats.1`), keyed by file name.
pub fn man_pages(cmd: &clap::Command) -> Result<BTreeMap<String, Vec<u8>>> {
    let mut out = BTreeMap::new();
    render_tree(cmd.clone(), &mut out)?;
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

/// Renders one binary's bash, zsh and fish completions, keyed by relative path.
pub fn completions(cmd: &clap::Command) -> BTreeMap<String, Vec<u8>> {
    use clap_complete::{generate, Shell};
    let mut out = BTreeMap::new();
    let mut cmd = cmd.clone();
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
    out
}

/// Writes one binary's generated files under `root` (`man/` and
/// `completions/`), leaving files that are already current untouched; returns
/// how many it wrote.
pub fn write(cmd: &clap::Command, root: &Path) -> Result<usize> {
    let mut n = 0;
    for (dir, files) in [("man", man_pages(cmd)?), ("completions", completions(cmd))] {
        for (rel, bytes) in files {
            let p = root.join(dir).join(rel);
            if let Some(parent) = p.parent() {
                std::fs::create_dir_all(parent).with_context(|| format!("cannot create `{}`", parent.display()))?;
            }
            if std::fs::read(&p).ok().as_deref() != Some(&bytes[..]) {
                std::fs::write(&p, &bytes).with_context(|| format!("cannot write `{}`", p.display()))?;
                n += 1;
            }
        }
    }
    Ok(n)
}
