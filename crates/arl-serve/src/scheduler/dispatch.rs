//! Data parallelism: the [`Dispatcher`] in front of several schedulers.
use super::messages::{Cmd, LoraResult, UpdateResult};
use super::shared::Shared;
use std::path::PathBuf;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use tokio::sync::oneshot;

/// Data parallelism (SGLang's `--dp-size`): several schedulers, each with
/// its own engine (its own copy of the weights and KV cache, on its own core
/// or GPU), behind one command channel. A new sequence goes to the replica
/// with the fewest sequences running, queued or on their way; aborts go to
/// every replica; pause, continue, flush and weight updates go to every
/// replica and answer once all have (an update succeeds only when every
/// replica's does; the front version changes then). Each replica applies an
/// update when its own running sequences are done, and stamps what it
/// generates with the version of the weights it ran. LoRA loads and unloads
/// go to every replica too; a load succeeds when every replica's does (a new
/// adapter that some replica could not load is unloaded from the others).
pub struct Dispatcher {
    rx: crossbeam_channel::Receiver<Cmd>,
    txs: Vec<crossbeam_channel::Sender<Cmd>>,
    front: Arc<Shared>,
    sent: Vec<usize>,
}

impl Dispatcher {
    /// `front.replicas[i]` is the state of the scheduler reading `txs[i]`.
    pub fn new(
        rx: crossbeam_channel::Receiver<Cmd>,
        txs: Vec<crossbeam_channel::Sender<Cmd>>,
        front: Arc<Shared>,
    ) -> Dispatcher {
        assert_eq!(txs.len(), front.replicas.len(), "one state per replica");
        let sent = vec![0; txs.len()];
        Dispatcher { rx, txs, front, sent }
    }

    /// The replica with the least work: running + queued + sent but not yet taken in.
    fn least_loaded(&self) -> usize {
        let load = |i: usize| {
            let r = &self.front.replicas[i];
            let unseen = self.sent[i].saturating_sub(r.received.load(Ordering::Relaxed));
            r.running.load(Ordering::Relaxed) + r.waiting.load(Ordering::Relaxed) + unseen
        };
        (0..self.txs.len()).min_by_key(|&i| (load(i), i)).unwrap_or(0)
    }

    /// Sends `make(reply)` to every replica and hands their answers, once all
    /// are in, to `done` (on its own thread: aborts and new requests keep
    /// flowing meanwhile, as they do to a single scheduler with an update pending).
    fn fan_out<T: Send + 'static>(
        &self,
        make: impl Fn(oneshot::Sender<T>) -> Cmd,
        done: impl FnOnce(Vec<Option<T>>) + Send + 'static,
    ) {
        let rxs: Vec<oneshot::Receiver<T>> = self
            .txs
            .iter()
            .map(|tx| {
                let (t, r) = oneshot::channel();
                let _ = tx.send(make(t));
                r
            })
            .collect();
        let spawned = std::thread::Builder::new()
            .name("arl-dp-reply".into())
            .spawn(move || done(rxs.into_iter().map(|r| r.blocking_recv().ok()).collect()));
        if let Err(e) = spawned {
            eprintln!("arl-serve: cannot start a thread to collect the replicas' answers: {e}");
        }
    }

    /// Runs until every command sender is gone.
    pub fn run(mut self) {
        while let Ok(c) = self.rx.recv() {
            match c {
                Cmd::Generate(job) => {
                    let i = self.least_loaded();
                    self.sent[i] += 1;
                    let _ = self.txs[i].send(Cmd::Generate(job));
                }
                Cmd::Abort { rid, all } => {
                    for tx in &self.txs {
                        let _ = tx.send(Cmd::Abort { rid: rid.clone(), all });
                    }
                }
                Cmd::Pause { mode, reply } => self.fan_out(
                    |r| Cmd::Pause { mode, reply: r },
                    move |_| {
                        let _ = reply.send(());
                    },
                ),
                Cmd::Continue { reply } => self.fan_out(
                    |r| Cmd::Continue { reply: r },
                    move |_| {
                        let _ = reply.send(());
                    },
                ),
                Cmd::Flush { reply } => self.fan_out(
                    |r| Cmd::Flush { reply: r },
                    move |all: Vec<Option<bool>>| {
                        let _ = reply.send(all.iter().all(|a| *a == Some(true)));
                    },
                ),
                Cmd::LoadLora { name, path, version, reply } => self.load_lora(name, path, version, reply),
                Cmd::UnloadLora { name, reply } => self.unload_lora(name, reply),
                Cmd::Update { path, version, abort_all, reply } => self.update(path, version, abort_all, reply),
            }
        }
    }

    /// A LoRA load on every replica: it succeeds when every replica's does;
    /// a new adapter that some replica could not load is unloaded from the
    /// others.
    fn load_lora(&self, name: String, path: String, version: Option<String>, reply: oneshot::Sender<LoraResult>) {
        let front = self.front.clone();
        let txs = self.txs.clone();
        let is_new = !front.adapters().contains_key(&name);
        let n = name.clone();
        self.fan_out(
            |r| Cmd::LoadLora { name: name.clone(), path: path.clone(), version: version.clone(), reply: r },
            move |all: Vec<Option<LoraResult>>| {
                let Some(mut error) = replica_failures(&all) else {
                    let info = all.into_iter().flatten().find_map(|r| r.info);
                    front.set_adapter(&n, info.clone());
                    let _ = reply.send(LoraResult { success: true, error: None, info });
                    return;
                };
                let loaded: Vec<usize> =
                    (0..all.len()).filter(|&i| all[i].as_ref().is_some_and(|r| r.success)).collect();
                if is_new {
                    // Back to no adapter of that name anywhere.
                    for &i in &loaded {
                        let (t, _r) = oneshot::channel();
                        let _ = txs[i].send(Cmd::UnloadLora { name: n.clone(), reply: t });
                    }
                } else if !loaded.is_empty() {
                    error.push_str(&format!(
                        " ({} of {} replicas did load the new version; the others serve the old one)",
                        loaded.len(),
                        all.len()
                    ));
                }
                let _ = reply.send(LoraResult { success: false, error: Some(error), info: None });
            },
        );
    }

    /// A LoRA unload on every replica.
    fn unload_lora(&self, name: String, reply: oneshot::Sender<LoraResult>) {
        let front = self.front.clone();
        let n = name.clone();
        self.fan_out(
            |r| Cmd::UnloadLora { name: name.clone(), reply: r },
            move |all: Vec<Option<LoraResult>>| {
                front.set_adapter(&n, None);
                let error = replica_failures(&all);
                let _ = reply.send(LoraResult { success: error.is_none(), error, info: None });
            },
        );
    }

    /// A weight update on every replica: it succeeds when every replica's
    /// does, and only then does the front's version change.
    fn update(&self, path: PathBuf, version: Option<String>, abort_all: bool, reply: oneshot::Sender<UpdateResult>) {
        let front = self.front.clone();
        let (p, v) = (path.clone(), version.clone());
        self.fan_out(
                |r| Cmd::Update { path: path.clone(), version: version.clone(), abort_all, reply: r },
                move |all: Vec<Option<UpdateResult>>| {
                    let paused = all.iter().flatten().map(|r| r.num_paused_requests).sum();
                    let failed: Vec<String> = all
                        .iter()
                        .enumerate()
                        .filter_map(|(i, r)| match r {
                            Some(r) if r.success => None,
                            Some(r) => Some(format!("replica {i}: {}", r.message)),
                            None => Some(format!("replica {i}: its scheduler stopped")),
                        })
                        .collect();
                    let result = if failed.is_empty() {
                        if let Ok(mut m) = front.model_path.lock() {
                            *m = p.display().to_string();
                        }
                        if let Some(v) = &v {
                            if let Ok(mut w) = front.weight_version.lock() {
                                *w = v.clone();
                            }
                        }
                        let message = all.into_iter().flatten().next().map(|r| r.message).unwrap_or_default();
                        UpdateResult { success: true, message, num_paused_requests: paused }
                    } else {
                        let updated = all.iter().filter(|r| r.as_ref().is_some_and(|r| r.success)).count();
                        let mut message = failed.join("; ");
                        if updated > 0 {
                            message.push_str(&format!(
                                " ({updated} of {} replicas did load the new weights; the server reports the old version until an update succeeds on all)",
                                all.len()
                            ));
                        }
                        UpdateResult { success: false, message, num_paused_requests: paused }
                    };
                    let _ = reply.send(result);
                },
            );
    }
}

/// Why a LoRA load or unload failed on some replicas: `None` when it did
/// not; the error once when every replica failed alike, else `replica i:
/// error` for each that failed.
fn replica_failures(all: &[Option<LoraResult>]) -> Option<String> {
    let errors: Vec<(usize, String)> = all
        .iter()
        .enumerate()
        .filter_map(|(i, r)| match r {
            Some(r) if r.success => None,
            Some(r) => Some((i, r.error.clone().unwrap_or_default())),
            None => Some((i, "its scheduler stopped".into())),
        })
        .collect();
    if errors.is_empty() {
        return None;
    }
    if errors.len() == all.len() && errors.iter().all(|e| e.1 == errors[0].1) {
        return Some(errors[0].1.clone());
    }
    Some(errors.iter().map(|(i, e)| format!("replica {i}: {e}")).collect::<Vec<_>>().join("; "))
}
