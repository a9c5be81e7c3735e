//! Checkpoint directories that appear whole or not at all: everything is
//! written into a temporary sibling, fsynced, then swapped into place with
//! one atomic `renameat2(RENAME_EXCHANGE)` (or a rename when the destination
//! is new), so a crash at any moment leaves either the old or the new
//! checkpoint under the name, never a mixture.
//!
//! A training checkpoint also holds the trainer's state (`trainer_state/`:
//! the AdamW moments and [`TrainerState`]), which is what `--resume` reads.
use super::config::Schedule;
use super::optim::AdamW;
use super::Sample;
use anyhow::{Context, Result};
use arl_model::{Model, SaveOptions};
use std::collections::BTreeMap;
use std::ffi::CString;
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};
use tch::Tensor;

/// Tokenizer and template files copied from the source model when present.
pub const TOKENIZER_FILES: &[&str] = &[
    "tokenizer.json",
    "tokenizer_config.json",
    "special_tokens_map.json",
    "vocab.json",
    "merges.txt",
    "chat_template.jinja",
    "added_tokens.json",
];

fn fsync_path(p: &Path) -> Result<()> {
    let f = std::fs::File::open(p).with_context(|| format!("cannot open `{}` to sync", p.display()))?;
    f.sync_all().with_context(|| format!("cannot sync `{}`", p.display()))
}

fn fsync_tree(dir: &Path) -> Result<()> {
    for e in std::fs::read_dir(dir)? {
        let p = e?.path();
        if p.is_dir() {
            fsync_tree(&p)?;
        } else {
            fsync_path(&p)?;
        }
    }
    fsync_path(dir)
}

fn cstr(p: &Path) -> Result<CString> {
    CString::new(p.as_os_str().as_bytes()).context("path contains a NUL byte")
}

/// Makes a checkpoint readable by other users, as `save_pretrained` leaves
/// it: directories 0755, files 0644 (temporary directories and files start
/// 0700 / 0600, and an inference server may run as another user).
fn share_tree(dir: &Path) -> Result<()> {
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o755))?;
    for e in std::fs::read_dir(dir)? {
        let e = e?;
        if e.file_type()?.is_dir() {
            share_tree(&e.path())?;
        } else {
            std::fs::set_permissions(e.path(), std::fs::Permissions::from_mode(0o644))?;
        }
    }
    Ok(())
}

/// A save killed between moving the previous checkpoint aside (`.NAME.old-PID`,
/// only without RENAME_EXCHANGE) and moving the new one in leaves no `dest`:
/// the previous checkpoint is put back. With `dest` in place it is removed.
fn restore_or_remove_old(parent: &Path, name: &str, dest: &Path) {
    for old in arl_core::io::dead_writers(parent, &format!(".{name}.old-")) {
        if dest.exists() {
            let _ = std::fs::remove_dir_all(&old);
        } else {
            let _ = std::fs::rename(&old, dest);
        }
    }
}

/// Writes a directory atomically: `fill` populates a temporary sibling of
/// `dest`, which then replaces `dest`.
pub fn write_dir_atomic(dest: &Path, fill: impl FnOnce(&Path) -> Result<()>) -> Result<()> {
    let parent = match dest.parent() {
        Some(p) if !p.as_os_str().is_empty() => p.to_path_buf(),
        _ => PathBuf::from("."),
    };
    std::fs::create_dir_all(&parent).with_context(|| format!("cannot create `{}`", parent.display()))?;
    let name = dest.file_name().context("checkpoint path has no name")?.to_string_lossy().into_owned();
    // The pid in the names lets a later save remove what a killed one left.
    let pid = std::process::id();
    arl_core::io::remove_stale_temps(&parent, &format!(".{name}.tmp-"));
    restore_or_remove_old(&parent, &name, dest);
    let tmp = tempfile::Builder::new().prefix(&format!(".{name}.tmp-{pid}-")).tempdir_in(&parent)?;
    fill(tmp.path())?;
    share_tree(tmp.path())?;
    fsync_tree(tmp.path())?;
    let tmp = tmp.keep();
    let result = if dest.exists() {
        let (a, b) = (cstr(&tmp)?, cstr(dest)?);
        // SAFETY: both are valid NUL-terminated paths.
        let rc =
            unsafe { libc::renameat2(libc::AT_FDCWD, a.as_ptr(), libc::AT_FDCWD, b.as_ptr(), libc::RENAME_EXCHANGE) };
        if rc == 0 {
            // `tmp` now holds the previous checkpoint.
            std::fs::remove_dir_all(&tmp).with_context(|| format!("removing the old checkpoint `{}`", tmp.display()))
        } else {
            // No RENAME_EXCHANGE (old kernel or filesystem): move the old one
            // aside first; a crash in between leaves it under `.NAME.old-*`.
            let old = parent.join(format!(".{name}.old-{pid}"));
            std::fs::rename(dest, &old)?;
            std::fs::rename(&tmp, dest)?;
            std::fs::remove_dir_all(&old).map_err(Into::into)
        }
    } else {
        std::fs::rename(&tmp, dest).map_err(Into::into)
    };
    if result.is_err() && tmp.exists() && dest.exists() {
        let _ = std::fs::remove_dir_all(&tmp);
    }
    result.with_context(|| format!("cannot move the checkpoint into `{}`", dest.display()))?;
    fsync_path(&parent)
}

/// Saves `model` with the tokenizer files of `tokenizer_dir` into `dest`,
/// atomically; `extra` may add files (trainer state).
pub fn save(
    model: &Model,
    dest: &Path,
    opts: &SaveOptions,
    tokenizer_dir: &Path,
    extra: impl FnOnce(&Path) -> Result<()>,
) -> Result<()> {
    write_dir_atomic(dest, |dir| {
        model.save(dir, opts)?;
        for f in TOKENIZER_FILES {
            let src = tokenizer_dir.join(f);
            if src.exists() {
                std::fs::copy(&src, dir.join(f)).with_context(|| format!("copying `{}`", src.display()))?;
            }
        }
        extra(dir)
    })
    .with_context(|| format!("saving checkpoint `{}`", dest.display()))
}

/// Deletes older checkpoints of the run `dest` belongs to, keeping the `keep`
/// newest. A run's checkpoints are the siblings named like `dest` with a
/// different trailing number (`step-40`, `step-41`, … for `step-42`).
pub fn prune(dest: &Path, keep: usize) -> Result<Vec<PathBuf>> {
    let name = dest.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default();
    let stem = name.trim_end_matches(|c: char| c.is_ascii_digit());
    if stem.len() == name.len() || keep == 0 {
        return Ok(vec![]);
    }
    let parent = match dest.parent() {
        Some(p) if !p.as_os_str().is_empty() => p.to_path_buf(),
        _ => PathBuf::from("."),
    };
    let mut runs: Vec<(u64, PathBuf)> = std::fs::read_dir(&parent)?
        .filter_map(|e| e.ok())
        .filter_map(|e| {
            let n = e.file_name().to_string_lossy().into_owned();
            let num = n.strip_prefix(stem)?.parse::<u64>().ok()?;
            let p = e.path();
            (p.join("config.json").exists() || arl_model::lora::is_adapter(&p)).then_some((num, p))
        })
        .collect();
    runs.sort();
    let mut removed = vec![];
    if runs.len() > keep {
        for (_, p) in &runs[..runs.len() - keep] {
            std::fs::remove_dir_all(p).with_context(|| format!("pruning `{}`", p.display()))?;
            removed.push(p.clone());
        }
    }
    Ok(removed)
}

/// What `--resume` restores besides the weights (`trainer_state/state.json`,
/// next to the optimizer's `optimizer.safetensors`).
#[derive(serde::Serialize, serde::Deserialize)]
pub(crate) struct TrainerState {
    pub step: u64,
    pub lr: f64,
    pub min_lr: f64,
    pub lr_warmup_steps: u64,
    pub lr_decay_steps: u64,
    pub lr_schedule: Schedule,
    pub seed: u64,
    /// Where in its input the run stood (absent in checkpoints of older versions).
    #[serde(default)]
    pub input: Option<InputPosition>,
}

/// How far a run got through its input, so that `--resume` over the same
/// input (same records, batch size, epochs, shuffle, seed) continues with the
/// next batch instead of training the first ones again.
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
pub(crate) struct InputPosition {
    /// Hash of the training plan ([`plan_fingerprint`]).
    pub fingerprint: String,
    pub samples: usize,
    /// Epoch and batches of it already trained.
    pub epoch: u64,
    pub batches: u64,
    /// The whole input was trained (a checkpoint written at the end).
    pub complete: bool,
}

const STATE_DIR: &str = "trainer_state";

impl TrainerState {
    /// Writes the state and the optimizer's moments ([`AdamW::state`]) into the checkpoint being written at `dir`.
    pub(crate) fn write(&self, dir: &Path, opt_state: &BTreeMap<String, Tensor>) -> Result<()> {
        let sdir = dir.join(STATE_DIR);
        std::fs::create_dir_all(&sdir)?;
        super::optim::save_state(opt_state, &sdir.join("optimizer.safetensors"))?;
        std::fs::write(sdir.join("state.json"), serde_json::to_string_pretty(self)? + "\n")?;
        Ok(())
    }

    /// Reads the state of the checkpoint `model_dir` and loads its moments into `opt`.
    pub(crate) fn resume(model_dir: &Path, opt: &mut AdamW) -> Result<TrainerState> {
        let sdir = model_dir.join(STATE_DIR);
        let text = std::fs::read_to_string(sdir.join("state.json"))
            .with_context(|| format!("`--resume`: `{}` has no trainer state", model_dir.display()))?;
        let st: TrainerState = serde_json::from_str(&text).context("trainer_state/state.json")?;
        opt.load(&sdir.join("optimizer.safetensors"), st.step)?;
        Ok(st)
    }
}

/// FNV-1a over what decides the batches a run trains, in order: the samples'
/// tokens, masks and advantages, the global batch size, epochs, shuffle and seed.
pub(crate) fn plan_fingerprint(samples: &[Sample], gbs: usize, epochs: u64, shuffle: bool, seed: u64) -> String {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    let mut eat = |x: u64| {
        for b in x.to_le_bytes() {
            h ^= u64::from(b);
            h = h.wrapping_mul(0x0100_0000_01b3);
        }
    };
    for v in [samples.len() as u64, gbs as u64, epochs, u64::from(shuffle), seed] {
        eat(v);
    }
    for s in samples {
        eat(s.tokens.len() as u64);
        eat(s.prompt_len as u64);
        s.tokens.iter().for_each(|&t| eat(t as u64));
        s.loss_mask.iter().for_each(|&m| eat(u64::from(m.to_bits())));
        s.advantages.iter().for_each(|&a| eat(u64::from(a.to_bits())));
    }
    format!("{h:016x}")
}
