//! The training forward of a GRPO group: one prompt shared by `n`
//! responses. The prompt goes through every layer once; each response
//! attends to the prompt's keys and values (the same tensors for all `n`,
//! so their gradients add up in the prompt once) and causally to its own.
//! The result is what [`Model::features`](super::Model::features) gives for
//! the `n` rows `prompt + response_i`, at about `P + n·R` positions of work
//! instead of `n·(P + R)`.
use super::block::Block;
use super::Model;
use tch::{Kind, Tensor};

impl Model {
    /// The last hidden states after the final norm of the rows `prompt +
    /// responses[i]`, [n, P+R, H]: `prompt` [P] (or [1, P]) int64, shared;
    /// `responses` [n, R] int64, right-padded (a padded position's state is
    /// never read by a real one, as in [`Model::features`]). The prompt's
    /// positions are the same tensor in every row.
    pub fn features_grouped(&self, prompt: &Tensor, responses: &Tensor) -> Tensor {
        let _amp = self.autocast();
        self.norm.forward(&self.trunk_grouped(prompt, responses))
    }

    /// [`Model::features_grouped`] through the LM head: logits [n, P+R, V] in float32.
    pub fn forward_grouped(&self, prompt: &Tensor, responses: &Tensor) -> Tensor {
        let _amp = self.autocast();
        self.head(&self.trunk_grouped(prompt, responses))
    }

    fn trunk_grouped(&self, prompt: &Tensor, responses: &Tensor) -> Tensor {
        let prompt = prompt.to_device(self.device).view([1, -1]);
        let responses = responses.to_device(self.device);
        let p = prompt.size()[1];
        let (n, r) = responses.size2().expect("responses [n,R]");
        let mut xp = self.embed(&prompt);
        let mut xr = self.embed(&responses);
        let (cp, sp) = self.rope(&Tensor::arange(p, (Kind::Int64, self.device)).unsqueeze(-1), xp.kind());
        let (cr, sr) = self.rope(&Tensor::arange_start(p, p + r, (Kind::Int64, self.device)).unsqueeze(-1), xr.kind());
        // A response position sees the whole prompt and its own past.
        let ones = |rows, cols| Tensor::ones([rows, cols], (Kind::Bool, self.device));
        let allowed = Tensor::cat(&[ones(r, p), ones(r, r).tril(0)], 1);
        let rep = (self.config.num_attention_heads / self.config.kv_heads()) as i64;
        // `attend` folds a kv head's `rep` query heads into its rows.
        let mask = allowed.repeat([rep, 1]).view([1, 1, rep * r, p + r]);
        let sel = self.train_sel(false);
        for layer in &self.layers {
            let mut kv = None;
            xp = layer.forward(&xp, &cp, &sp, sel, |a, q, k, v| {
                kv = Some((k.shallow_clone(), v.shallow_clone()));
                Block::train_attn(a, q, k, v)
            });
            let (kp, vp) = kv.expect("the prompt's keys and values");
            xr = layer.forward(&xr, &cr, &sr, sel, |a, q, k, v| {
                let widen = |shared: &Tensor, own: Tensor| {
                    let s = shared.size();
                    Tensor::cat(&[shared.expand([n, s[1], s[2], s[3]], false), own], 1).transpose(1, 2)
                };
                let (k, v) = (widen(&kp, k), widen(&vp, v));
                a.attend(&q.transpose(1, 2), &k, &v, Some(&mask), false)
            });
        }
        let h = xp.size()[2];
        Tensor::cat(&[xp.expand([n, p, h], false), xr], 1)
    }
}
