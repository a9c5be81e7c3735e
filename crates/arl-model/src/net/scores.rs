//! Scoring through the LM head without the logits of the whole batch:
//! per-token log-probs and entropy ([`Model::token_scores`]), the lean
//! training forward and backward ([`Model::forward_backward_lean`]), and
//! [`token_logprobs`], the formula trainer and server share.
use super::linear::Sel;
use super::plan::Layout;
use super::Model;
use anyhow::{bail, Result};
use tch::{Kind, Tensor};

/// Whether [`Model::token_scores`] and [`Model::forward_backward_lean`]
/// compute the entropy, and whether it takes part in the gradient.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum EntropyMode {
    Off,
    /// Values only (for metrics).
    Value,
    /// Values, and its gradient flows (an entropy bonus in the loss).
    Grad,
}

/// How the LM head is scored.
#[derive(Debug, Clone, Copy)]
pub struct HeadOptions {
    /// Sampling temperature: scores are of `softmax(logits / temperature)`.
    pub temperature: f64,
    /// Positions through the LM head at a time; 0: [`HeadOptions::auto_chunk`].
    pub chunk_tokens: usize,
    pub entropy: EntropyMode,
}

impl HeadOptions {
    /// Positions per chunk when unsaid: about 64M float32 logits (256 MB) a
    /// chunk — 441 positions at Qwen's 151,936 entries, 1,365 at SmolLM2's
    /// 49,152 — at least 16.
    pub fn auto_chunk(vocab: usize) -> usize {
        ((1usize << 26) / vocab.max(1)).max(16)
    }

    fn chunk_rows(&self, vocab: usize) -> usize {
        if self.chunk_tokens == 0 {
            Self::auto_chunk(vocab)
        } else {
            self.chunk_tokens
        }
    }
}

/// Per-token scores of next tokens, [B, T−1] float32 (position p scores
/// token p+1; 0 where not scored).
pub struct TokenScores {
    pub logp: Tensor,
    pub entropy: Option<Tensor>,
}

/// Log-probability of each chosen token: `log_softmax(logits.float() / temperature)`
/// at `ids`. `logits` [..., V], `ids` [...] → [...] float32. Trainer and server
/// both use this, so their log-probs agree.
pub fn token_logprobs(logits: &Tensor, ids: &Tensor, temperature: f64) -> Tensor {
    let l = logits.to_kind(Kind::Float);
    let l = if temperature != 1.0 { l / temperature } else { l };
    let ids = ids.to_device(l.device()).to_kind(Kind::Int64).unsqueeze(-1);
    // gather − logsumexp: the same value as log_softmax without materialising it.
    l.gather(-1, &ids, false).squeeze_dim(-1) - l.logsumexp([-1i64].as_slice(), false)
}

impl Model {
    /// The LM head's matrix [V, H] (the embedding when tied).
    fn head_weight(&self) -> &Tensor {
        self.lm_head.as_ref().unwrap_or(&self.embed_tokens)
    }

    /// Rows `h` [N, H] (after the final norm) → the float32 log-prob of
    /// `targets` [N] under `softmax(logits / temperature)`, and the entropy
    /// `logsumexp(l) − Σ p·l` when asked: the formulas of [`token_logprobs`]
    /// and the trainer's entropy, one row at a time. Differentiable.
    fn head_scores(&self, h: &Tensor, targets: &Tensor, temperature: f64, entropy: bool) -> (Tensor, Option<Tensor>) {
        let l = h.linear::<Tensor>(self.head_weight(), None).to_kind(Kind::Float);
        let l = if temperature != 1.0 { l / temperature } else { l };
        let lse = l.logsumexp([-1i64].as_slice(), false);
        let logp = l.gather(-1, &targets.unsqueeze(-1), false).squeeze_dim(-1) - &lse;
        let ent = entropy.then(|| {
            let p = l.softmax(-1, Kind::Float);
            &lse - (p * &l).sum_dim_intlist([-1i64].as_slice(), false, Kind::Float)
        });
        (logp, ent)
    }

    /// [`Model::head_scores`] of `rows` [N, H] in chunks of `chunk` rows,
    /// without gradient: never more than one chunk's logits alive.
    fn head_scores_chunked(&self, rows: &Tensor, targets: &Tensor, o: &HeadOptions) -> (Tensor, Option<Tensor>) {
        let n = rows.size()[0];
        let chunk = o.chunk_rows(self.config.vocab_size) as i64;
        let want_ent = o.entropy != EntropyMode::Off;
        tch::no_grad(|| {
            let (mut lps, mut ents) = (Vec::new(), Vec::new());
            let mut at = 0;
            while at < n {
                let m = chunk.min(n - at);
                let (lp, ent) =
                    self.head_scores(&rows.narrow(0, at, m), &targets.narrow(0, at, m), o.temperature, want_ent);
                lps.push(lp);
                ents.extend(ent);
                at += m;
            }
            let cat = |v: Vec<Tensor>| {
                if v.is_empty() {
                    Tensor::zeros([0], (Kind::Float, self.device))
                } else {
                    Tensor::cat(&v, 0)
                }
            };
            (cat(lps), want_ent.then(|| cat(ents)))
        })
    }

    /// Per-token log-probs of each next token (and the entropy when asked),
    /// [B, T−1] float32 (position p scores token p+1), without gradient and
    /// without the logits of the whole batch: the LM head runs over
    /// `o.chunk_tokens` positions at a time. `ids` [B, T] right-padded;
    /// `needed` [B, T−1] (non-zero: score it) skips the rest (prompt,
    /// padding), which read 0. With [`Layout::Packed`] the rows run
    /// concatenated, without padding (see [`Layout`]).
    pub fn token_scores(
        &self,
        ids: &Tensor,
        needed: Option<&Tensor>,
        layout: Layout<'_>,
        o: &HeadOptions,
    ) -> TokenScores {
        tch::no_grad(|| {
            let _amp = self.autocast();
            let ids = ids.to_device(self.device);
            let p = self.plan(&ids, needed, layout);
            let (x, _, _) = self.plan_trunk(&p, false, self.train_sel(false));
            let rows = self.plan_rows(&p, &x);
            let (lp, ent) = self.head_scores_chunked(&rows, &p.targets, o);
            TokenScores { logp: self.spread(&lp, &p), entropy: ent.map(|e| self.spread(&e, &p)) }
        })
    }

    /// Forward, `loss_of(scores).backward()`, all gradients accumulated,
    /// without ever holding the logits of the whole micro-batch: the scores
    /// ([`Model::token_scores`]'s, here leaves that take the loss's gradient)
    /// are computed chunk by chunk without a graph; after the loss's
    /// backward, each chunk's logits are recomputed with a graph and
    /// back-propagated with their share of that gradient (∂(scores·g)/∂θ),
    /// into the hidden states and the head; then the hidden states' gradient
    /// goes back through the model — the gradients of the plain forward, for
    /// one more pass through the LM head. The entropy takes part in the
    /// gradient only with [`EntropyMode::Grad`]. With `checkpointed`
    /// (activation checkpointing), the forward keeps only each block's input
    /// and the backward recomputes one block at a time, back-propagating the
    /// incoming gradient g through it as ∂(out·g)/∂θ — the same gradients for
    /// about one more forward, with one block's activations alive.
    #[allow(clippy::too_many_arguments)]
    pub fn forward_backward_lean(
        &self,
        ids: &Tensor,
        needed: Option<&Tensor>,
        layout: Layout<'_>,
        o: &HeadOptions,
        checkpointed: bool,
        loss_of: impl FnOnce(&TokenScores) -> Result<Tensor>,
    ) -> Result<()> {
        let _amp = self.autocast();
        let sel = self.train_sel(true);
        if checkpointed && matches!(sel, Sel::All { dropout, .. } if dropout > 0.0) {
            bail!("LoRA dropout with gradient checkpointing: the recomputed blocks would draw other dropout masks");
        }
        let ids = ids.to_device(self.device);
        let p = self.plan(&ids, needed, layout);
        // The last hidden states: with the trunk's graph, or (checkpointed)
        // a leaf, each block's input kept.
        let (x, inputs, (cos, sin)) = self.plan_trunk(&p, checkpointed, sel);
        let x = if checkpointed { x.detach().set_requires_grad(true) } else { x };
        let rows = self.plan_rows(&p, &x);
        let rows_leaf = rows.detach().set_requires_grad(true);
        let (lp, ent) = self.head_scores_chunked(&rows_leaf, &p.targets, o);
        let lp = lp.set_requires_grad(true);
        let ent_grad = o.entropy == EntropyMode::Grad;
        let ent = ent.map(|e| e.set_requires_grad(ent_grad));
        let scores = TokenScores { logp: self.spread(&lp, &p), entropy: ent.as_ref().map(|e| self.spread(e, &p)) };
        loss_of(&scores)?.backward();
        let n = p.rows.size()[0];
        if n == 0 {
            return Ok(());
        }
        let grad_of = |v: &Tensor| {
            let g = v.grad();
            g.defined().then_some(g)
        };
        let (g_lp, g_ent) = (grad_of(&lp), ent.as_ref().filter(|_| ent_grad).and_then(grad_of));
        if g_lp.is_none() && g_ent.is_none() {
            return Ok(());
        }
        let chunk = o.chunk_rows(self.config.vocab_size) as i64;
        let mut at = 0;
        while at < n {
            let m = chunk.min(n - at);
            let (lpc, entc) = self.head_scores(
                &rows_leaf.narrow(0, at, m),
                &p.targets.narrow(0, at, m),
                o.temperature,
                g_ent.is_some(),
            );
            let mut terms = Vec::with_capacity(2);
            if let Some(g) = &g_lp {
                terms.push((lpc * g.narrow(0, at, m)).sum(Kind::Float));
            }
            if let (Some(g), Some(e)) = (&g_ent, entc) {
                terms.push((e * g.narrow(0, at, m)).sum(Kind::Float));
            }
            Tensor::stack(&terms, 0).sum(Kind::Float).backward();
            at += m;
        }
        (rows * rows_leaf.grad()).sum(Kind::Float).backward();
        if let Some(inputs) = inputs {
            let mut g = x.grad();
            for (layer, xin) in self.layers.iter().zip(inputs).rev() {
                let xin = xin.detach().set_requires_grad(true);
                let out = layer.forward(&xin, &cos, &sin, sel, |a, q, k, v| p.attend(a, q, k, v));
                (out * &g).sum(Kind::Float).backward();
                g = xin.grad();
            }
            // (A frozen embedding — LoRA — takes no gradient.)
            if self.embed_tokens.requires_grad() {
                (self.embed(&p.input) * g).sum(Kind::Float).backward();
            }
        }
        Ok(())
    }
}
