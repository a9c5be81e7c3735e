# Print an optspec for argparse to handle cmd's options that are independent of any subcommand.
function __fish_arl_train_global_optspecs
    string join \n model= save= save-interval= keep-last= resume save-dtype= max-shard-size= loss= policy-loss= eps-clip= eps-clip-high= eps-clip-c= recompute-old-logprobs temperature= ref-model= kl-loss-coef= kl-loss-type= entropy-coef= tis-clip= opsm-delta= loss-agg= loss-agg-horizon= global-batch-size= max-tokens-per-micro-batch= no-packing no-shared-prefix epochs= shuffle lr= min-lr= lr-warmup-steps= lr-schedule= max-steps= lr-decay-steps= weight-decay= adam-beta1= adam-beta2= adam-eps= clip-grad= device= precision= threads= logprob-chunk-tokens= gradient-checkpointing seed= metrics= nproc= collective-timeout= allreduce-bucket-mb= zero-stage= train-critic critic= critic-save= critic-lr= value-clip= lora-rank= lora-alpha= lora-dropout= lora-targets= i/input= on-error= rejects= q/quiet h/help V/version
end

function __fish_arl_train_needs_command
    # Figure out if the current invocation already has a command.
    set -l cmd (commandline -opc)
    set -e cmd[1]
    argparse -s (__fish_arl_train_global_optspecs) -- $cmd 2>/dev/null
    or return
    if set -q argv[1]
        # Also print the command, so this can be used to figure out what it is.
        echo $argv[1]
        return 1
    end
    return 0
end

function __fish_arl_train_using_subcommand
    set -l cmd (__fish_arl_train_needs_command)
    test -z "$cmd"
    and return 1
    contains -- $cmd[1] $argv
end

complete -c arl-train -n "__fish_arl_train_needs_command" -l model -d 'Model directory to start from (HF layout: config.json, *.safetensors, tokenizer files)' -r -F
complete -c arl-train -n "__fish_arl_train_needs_command" -l save -d 'Where to write the trained checkpoint (replaced atomically)' -r -F
complete -c arl-train -n "__fish_arl_train_needs_command" -l save-interval -d 'Also write the checkpoint to `--save` every N optimizer steps (0: only at the end)' -r
complete -c arl-train -n "__fish_arl_train_needs_command" -l keep-last -d 'After saving, delete older checkpoints of the run: siblings of `--save` with the same name but another trailing number (`step-40` for `step-42`), keeping the N newest (0: keep all)' -r
complete -c arl-train -n "__fish_arl_train_needs_command" -l save-dtype -d 'Tensor dtype of the saved weights: `auto` is the model\'s `torch_dtype` (float32, bfloat16, float16)' -r
complete -c arl-train -n "__fish_arl_train_needs_command" -l max-shard-size -d 'Largest safetensors shard in bytes (suffixes KB, MB, GB)' -r
complete -c arl-train -n "__fish_arl_train_needs_command" -l loss -d '`rl` (policy gradient on `advantages`) or `sft` (cross-entropy)' -r -f -a "rl\t'Policy-gradient RL (`--policy-loss`), with KL, entropy, TIS, OPSM'
sft\t'Cross-entropy on `loss_mask` tokens (or assistant turns of `messages`)'"
complete -c arl-train -n "__fish_arl_train_needs_command" -l policy-loss -d 'Policy loss: per-token PPO ratio or GSPO\'s sequence-level ratio' -r -f -a "ppo\t'PPO clipped surrogate with per-token ratios'
gspo\t'GSPO: the sequence-level ratio exp(mean_t(log π − log π_old)), clipped like the token ratio'"
complete -c arl-train -n "__fish_arl_train_needs_command" -l eps-clip -d 'Lower clip range: the ratio is clipped to [1 − eps, 1 + eps-high]' -r
complete -c arl-train -n "__fish_arl_train_needs_command" -l eps-clip-high -d 'Upper clip range (clip-higher, DAPO); default: `--eps-clip`' -r
complete -c arl-train -n "__fish_arl_train_needs_command" -l eps-clip-c -d 'Dual clip constant c > 1: for negative advantages the loss is at most −A·c' -r
complete -c arl-train -n "__fish_arl_train_needs_command" -l temperature -d 'Sampling temperature the rollout used; log-probs are of logits / T' -r
complete -c arl-train -n "__fish_arl_train_needs_command" -l ref-model -d 'Reference model for the KL loss (when records carry no `ref_log_probs`)' -r -F
complete -c arl-train -n "__fish_arl_train_needs_command" -l kl-loss-coef -d 'Weight of the KL-to-reference loss (0: off)' -r
complete -c arl-train -n "__fish_arl_train_needs_command" -l kl-loss-type -d 'KL estimator of the KL loss' -r -f -a "k1\t'log π − log π_ref'
k2\t'½ (log π − log π_ref)²'
k3\t'exp(log π_ref − log π) − (log π_ref − log π) − 1'
low_var_kl\t'k3 clamped to [−10, 10] (verl\'s `low_var_kl`)'"
complete -c arl-train -n "__fish_arl_train_needs_command" -l entropy-coef -d 'Weight of the entropy bonus (subtracted from the loss; 0: off)' -r
complete -c arl-train -n "__fish_arl_train_needs_command" -l tis-clip -d 'Truncated importance sampling: weight each token\'s policy loss by min(π_old/π_rollout, CLIP) (needs `rollout_log_probs`; off by default)' -r
complete -c arl-train -n "__fish_arl_train_needs_command" -l opsm-delta -d 'Off-policy sequence masking: drop the tokens of a negative-advantage sequence whose mean log(π_rollout/π) exceeds DELTA (off by default)' -r
complete -c arl-train -n "__fish_arl_train_needs_command" -l loss-agg -d 'How per-token losses are reduced' -r -f -a "token-mean\t'Mean over every trainable token of the global batch'
seq-mean-token-sum\t'Sum over a sequence\'s tokens, mean over sequences'
seq-mean-token-mean\t'Mean over a sequence\'s tokens, mean over sequences'
seq-mean-token-sum-norm\t'Sum over a sequence\'s tokens divided by a constant horizon, mean over sequences (Dr. GRPO, arXiv:2503.20783)'"
complete -c arl-train -n "__fish_arl_train_needs_command" -l loss-agg-horizon -d 'Horizon of `seq-mean-token-sum-norm`; default: the longest response of the step' -r
complete -c arl-train -n "__fish_arl_train_needs_command" -l global-batch-size -d 'Records per optimizer step (default: all records, one step per epoch)' -r
complete -c arl-train -n "__fish_arl_train_needs_command" -l max-tokens-per-micro-batch -d 'Token budget of one micro-batch: the samples\' own tokens, packed longest-first into as few micro-batches as fit (with `--no-packing`: batch × padded length); a longer sequence goes alone' -r
complete -c arl-train -n "__fish_arl_train_needs_command" -l epochs -d 'Passes over the input' -r
complete -c arl-train -n "__fish_arl_train_needs_command" -l lr -d 'Peak learning rate' -r
complete -c arl-train -n "__fish_arl_train_needs_command" -l min-lr -d 'Final learning rate of the cosine schedule' -r
complete -c arl-train -n "__fish_arl_train_needs_command" -l lr-warmup-steps -d 'Linear warm-up steps' -r
complete -c arl-train -n "__fish_arl_train_needs_command" -l lr-schedule -d 'Schedule after warm-up' -r -f -a "constant\t'Linear warm-up, then the peak rate'
cosine\t'Linear warm-up, then cosine decay to `--min-lr` over `--lr-decay-steps`'"
complete -c arl-train -n "__fish_arl_train_needs_command" -l max-steps -d 'Stop after N optimizer steps of this invocation, saving where the run stands in its input: `--resume` from that checkpoint with the same input continues with the next batch (the schedule spans the whole input)' -r
complete -c arl-train -n "__fish_arl_train_needs_command" -l lr-decay-steps -d 'Step at which the cosine reaches `--min-lr` (default: the last step of this run)' -r
complete -c arl-train -n "__fish_arl_train_needs_command" -l weight-decay -d 'AdamW decoupled weight decay (not applied to biases and norms)' -r
complete -c arl-train -n "__fish_arl_train_needs_command" -l adam-beta1 -d 'AdamW β1' -r
complete -c arl-train -n "__fish_arl_train_needs_command" -l adam-beta2 -d 'AdamW β2' -r
complete -c arl-train -n "__fish_arl_train_needs_command" -l adam-eps -d 'AdamW ε' -r
complete -c arl-train -n "__fish_arl_train_needs_command" -l clip-grad -d 'Clip the global gradient norm to this value (0: no clipping)' -r
complete -c arl-train -n "__fish_arl_train_needs_command" -l device -d '`cpu`, `cuda` or `cuda:N`' -r
complete -c arl-train -n "__fish_arl_train_needs_command" -l precision -d 'Numeric precision' -r -f -a "auto\t'bf16 on CUDA; on the CPU `amp` where bf16 matrix multiplies measure 1.5× float32 at the model\'s shape, else fp32 (logged; the metrics\' `precision`)'
fp32\t'Everything in float32'
bf16\t'bf16 weights and activations with float32 master weights and optimizer state'
amp\t'Automatic mixed precision: float32 weights, matrix multiplies in bf16 under libtorch autocast (CUDA or CPU)'"
complete -c arl-train -n "__fish_arl_train_needs_command" -l threads -d 'CPU threads for libtorch (0: all cores)' -r
complete -c arl-train -n "__fish_arl_train_needs_command" -l logprob-chunk-tokens -d 'Positions that go through the LM head at a time for log-probs and entropy (0: about 256 MB of float32 logits a chunk, e.g. 441 positions at a 151,936-token vocabulary); the logits of a whole micro-batch are never held' -r
complete -c arl-train -n "__fish_arl_train_needs_command" -l seed -d 'Seed for shuffling and libtorch\'s generators' -r
complete -c arl-train -n "__fish_arl_train_needs_command" -l metrics -d 'Append one JSON line of metrics per optimizer step to FILE' -r -F
complete -c arl-train -n "__fish_arl_train_needs_command" -l nproc -d 'Data-parallel processes on this machine: `arl-train` starts itself N times under `mpirun` (shared memory and loopback only). Under a launcher of your own (`mpirun -n N arl-train …`, across machines) leave it at 1 or give the same N. Each rank trains on a token-balanced share of every global batch; the update equals one process on the whole batch' -r
complete -c arl-train -n "__fish_arl_train_needs_command" -l collective-timeout -d 'Seconds a rank waits in a collective (gradient all-reduce, broadcast, barrier) for the slowest rank before the whole job is aborted with the missing ranks named (0: wait forever); must exceed rank 0\'s checkpoint save time' -r
complete -c arl-train -n "__fish_arl_train_needs_command" -l allreduce-bucket-mb -d 'Size of one gradient all-reduce bucket in MiB (float32); also the bucket of ZeRO\'s reduce-scatter and all-gather' -r
complete -c arl-train -n "__fish_arl_train_needs_command" -l zero-stage -l zero -d 'Shard the optimizer over the ranks (ZeRO, as DeepSpeed\'s stages): 1 keeps each rank\'s AdamW moments (and fp32 masters) for 1/N of the parameters\' elements only, updates those and all-gathers the updated parameters; 2 also replaces the gradient all-reduce by a reduce-scatter, so a rank receives the summed gradients of its share only (less traffic). 0: every rank holds the whole state. Same update as one process; checkpoints are whole, and resume with any number of ranks. Needs 2 or more ranks' -r
complete -c arl-train -n "__fish_arl_train_needs_command" -l critic -d 'The critic to train: a critic checkpoint, or a policy checkpoint (its weights with a zero value head); default: `--model`' -r -F
complete -c arl-train -n "__fish_arl_train_needs_command" -l critic-save -d 'Where to write the trained critic (replaced atomically)' -r -F
complete -c arl-train -n "__fish_arl_train_needs_command" -l critic-lr -d 'The critic\'s learning rate (constant; its other AdamW settings and the gradient clipping are the policy\'s)' -r
complete -c arl-train -n "__fish_arl_train_needs_command" -l value-clip -d 'Clip range of the value: V is clipped to V_old ± EPS in the loss (off by default)' -r
complete -c arl-train -n "__fish_arl_train_needs_command" -l lora-rank -d 'Train a LoRA adapter of rank R instead of the model\'s weights (0: off). The base weights are frozen (no gradients, no optimizer state); A is drawn as PEFT does (uniform ±1/√in), B is zero, so the first step\'s policy is exactly the base\'s. `--save` then writes the adapter alone in PEFT\'s format (`adapter_config.json` naming `--model` as the base, `adapter_model.safetensors`, trainer state, tokenizer files); `--model` may be such a directory to continue training it (its own rank and targets; `--lora-*` flags, if given, must agree). `arl-train merge` folds an adapter into its base. With `--train-critic` the critic gets an adapter of the same shape too (its value head trains in full; saved as `value_head.safetensors` beside the critic\'s adapter)' -r
complete -c arl-train -n "__fish_arl_train_needs_command" -l lora-alpha -d 'Scaling numerator: the adapter adds (ALPHA / R)·B·A·x' -r
complete -c arl-train -n "__fish_arl_train_needs_command" -l lora-dropout -d 'Dropout on the adapter\'s input while training (not with `--gradient-checkpointing`)' -r
complete -c arl-train -n "__fish_arl_train_needs_command" -l lora-targets -d 'Projections that get an adapter, by their checkpoint names (`q_proj,k_proj,v_proj,o_proj,gate_proj,up_proj,down_proj`), or `all-linear` (all of them)' -r
complete -c arl-train -n "__fish_arl_train_needs_command" -s i -l input -d 'Input file (JSONL or Parquet, detected from content); repeat for several; `-` or none reads stdin' -r -F
complete -c arl-train -n "__fish_arl_train_needs_command" -l on-error -d 'What to do with a bad record: `fail` stops (exit 65, no output file), `skip` keeps going and writes it to `--rejects`' -r -f -a "fail\t'Stop with an error naming the record; write no output file'
skip\t'Keep going; put every bad record in the `--rejects` file'"
complete -c arl-train -n "__fish_arl_train_needs_command" -l rejects -d 'File that receives every bad record (the original line verbatim for JSONL, the row as JSON for Parquet) when `--on-error skip`' -r -F
complete -c arl-train -n "__fish_arl_train_needs_command" -l resume -d 'Continue from `--model`\'s trainer state (optimizer moments, step counter, schedule position), as written by an earlier `arl-train --save`'
complete -c arl-train -n "__fish_arl_train_needs_command" -l recompute-old-logprobs -d 'Recompute the old-policy log-probs with `--model` before the first update (otherwise they are the records\' `rollout_log_probs`)'
complete -c arl-train -n "__fish_arl_train_needs_command" -l no-packing -d 'Pad micro-batches to their longest sample instead of packing: by default the samples of a micro-batch run concatenated, positions restarting and attention kept within each sample (the same values, without computing on padding)'
complete -c arl-train -n "__fish_arl_train_needs_command" -l no-shared-prefix -d 'Run every sample\'s prompt on its own: by default the packed samples that share their prompt (a GRPO group) are kept in one micro-batch and their common prefix runs through the model once, each response attending to its keys and values (the same log-probs and gradients; the budget counts the positions that run). Also for the log-prob passes (`--recompute-old-logprobs`, `--ref-model`) and the critic'
complete -c arl-train -n "__fish_arl_train_needs_command" -l shuffle -d 'Shuffle the records each epoch (seeded by `--seed`)'
complete -c arl-train -n "__fish_arl_train_needs_command" -l gradient-checkpointing -d 'Activation checkpointing: keep only each block\'s input during the forward and recompute the block in the backward (less memory, ~1 more forward)'
complete -c arl-train -n "__fish_arl_train_needs_command" -l train-critic -d 'Also train the critic, one optimizer step per policy step on the same records: ½·max((V−R)², (clip(V, V_old±EPS)−R)²) on trainable tokens (`loss_mask` 1), token mean, against `returns`, with V_old the records\' `values`. Adds `value_loss`, `value_clipfrac` and `value_explained_var` (1 − Var(R−V_old)/Var(R)) to the metrics. The critic is saved to `--critic-save` (with its AdamW state) before the policy is saved'
complete -c arl-train -n "__fish_arl_train_needs_command" -s q -l quiet -d 'No progress bar and no summary on stderr'
complete -c arl-train -n "__fish_arl_train_needs_command" -s h -l help -d 'Print help (see more with \'--help\')'
complete -c arl-train -n "__fish_arl_train_needs_command" -s V -l version -d 'Print version'
complete -c arl-train -n "__fish_arl_train_needs_command" -f -a "init" -d 'Write a randomly initialised model (config + safetensors + tokenizer)'
complete -c arl-train -n "__fish_arl_train_needs_command" -f -a "make-tokenizer" -d 'Write arl\'s character-level test tokenizer (tokenizer.json, tokenizer_config.json)'
complete -c arl-train -n "__fish_arl_train_needs_command" -f -a "logprobs" -d 'Write `ref_log_probs` (each response token\'s log-prob under `--model`) into records'
complete -c arl-train -n "__fish_arl_train_needs_command" -f -a "values" -d 'Write `values` (PPO\'s critic: each response token\'s value under `--critic`) into records'
complete -c arl-train -n "__fish_arl_train_needs_command" -f -a "convert" -d 'Convert a GGUF model (llama.cpp\'s format) into a Hugging Face model directory'
complete -c arl-train -n "__fish_arl_train_needs_command" -f -a "merge" -d 'Fold a LoRA adapter into its base model: an ordinary checkpoint any server loads'
complete -c arl-train -n "__fish_arl_train_needs_command" -f -a "render" -d 'Render SFT demonstrations (`messages`) into `tokens`, `prompt_len` and `loss_mask` once'
complete -c arl-train -n "__fish_arl_train_needs_command" -f -a "help" -d 'Print this message or the help of the given subcommand(s)'
complete -c arl-train -n "__fish_arl_train_using_subcommand init" -l config -d 'Model config (HF `config.json` keys: model_type, vocab_size, hidden_size, …)' -r -F
complete -c arl-train -n "__fish_arl_train_using_subcommand init" -l tokenizer -d 'Directory whose tokenizer files are copied into the model' -r -F
complete -c arl-train -n "__fish_arl_train_using_subcommand init" -l out -d 'Output model directory (written atomically)' -r -F
complete -c arl-train -n "__fish_arl_train_using_subcommand init" -l seed -d 'Seed of the random initialisation' -r
complete -c arl-train -n "__fish_arl_train_using_subcommand init" -l dtype -d 'Tensor dtype of the written weights (float32, bfloat16, float16)' -r
complete -c arl-train -n "__fish_arl_train_using_subcommand init" -s h -l help -d 'Print help'
complete -c arl-train -n "__fish_arl_train_using_subcommand make-tokenizer" -l out -d 'Output directory' -r -F
complete -c arl-train -n "__fish_arl_train_using_subcommand make-tokenizer" -l template -d 'Chat template: Qwen2.5\'s (tool signatures in the system turn) or a compact one (`Tools: name, …`; same call and result format), which keeps character-level sequences of models trained from scratch short' -r -f -a "qwen\t'Qwen2.5\'s tool header: instructions and every tool\'s JSON signature'
compact\t'One line naming the tools; calls and results as Qwen writes them'"
complete -c arl-train -n "__fish_arl_train_using_subcommand make-tokenizer" -s h -l help -d 'Print help (see more with \'--help\')'
complete -c arl-train -n "__fish_arl_train_using_subcommand logprobs" -l model -d 'Model whose log-probs are written' -r -F
complete -c arl-train -n "__fish_arl_train_using_subcommand logprobs" -l temperature -d 'Sampling temperature applied to the logits' -r
complete -c arl-train -n "__fish_arl_train_using_subcommand logprobs" -l max-tokens-per-micro-batch -d 'Token budget of one forward batch' -r
complete -c arl-train -n "__fish_arl_train_using_subcommand logprobs" -l logprob-chunk-tokens -d 'Positions through the LM head at a time (0: about 256 MB of float32 logits a chunk)' -r
complete -c arl-train -n "__fish_arl_train_using_subcommand logprobs" -l device -d '`cpu`, `cuda` or `cuda:N`' -r
complete -c arl-train -n "__fish_arl_train_using_subcommand logprobs" -l threads -d 'CPU threads for libtorch (0: all cores)' -r
complete -c arl-train -n "__fish_arl_train_using_subcommand logprobs" -s i -l input -d 'Input file (JSONL or Parquet, detected from content); repeat for several; `-` or none reads stdin' -r -F
complete -c arl-train -n "__fish_arl_train_using_subcommand logprobs" -l on-error -d 'What to do with a bad record: `fail` stops (exit 65, no output file), `skip` keeps going and writes it to `--rejects`' -r -f -a "fail\t'Stop with an error naming the record; write no output file'
skip\t'Keep going; put every bad record in the `--rejects` file'"
complete -c arl-train -n "__fish_arl_train_using_subcommand logprobs" -l rejects -d 'File that receives every bad record (the original line verbatim for JSONL, the row as JSON for Parquet) when `--on-error skip`' -r -F
complete -c arl-train -n "__fish_arl_train_using_subcommand logprobs" -s o -l output -d 'Output file, written atomically (temporary name, renamed when complete); none or `-` writes stdout' -r -F
complete -c arl-train -n "__fish_arl_train_using_subcommand logprobs" -l format -d 'Output format; default: from the output\'s extension (`.parquet` → Parquet), JSONL otherwise and on stdout' -r -f -a "jsonl\t''
parquet\t''"
complete -c arl-train -n "__fish_arl_train_using_subcommand logprobs" -l no-shared-prefix -d 'Run every sample\'s prompt on its own (by default samples that share their prompt run it once: the same values)'
complete -c arl-train -n "__fish_arl_train_using_subcommand logprobs" -s q -l quiet -d 'No progress bar and no summary on stderr'
complete -c arl-train -n "__fish_arl_train_using_subcommand logprobs" -s h -l help -d 'Print help (see more with \'--help\')'
complete -c arl-train -n "__fish_arl_train_using_subcommand values" -l critic -d 'The critic: a critic checkpoint (`arl-train --train-critic --critic-save`), or a policy checkpoint (its weights with a zero value head, so every value is 0)' -r -F
complete -c arl-train -n "__fish_arl_train_using_subcommand values" -l max-tokens-per-micro-batch -d 'Token budget of one forward batch' -r
complete -c arl-train -n "__fish_arl_train_using_subcommand values" -l device -d '`cpu`, `cuda` or `cuda:N`' -r
complete -c arl-train -n "__fish_arl_train_using_subcommand values" -l threads -d 'CPU threads for libtorch (0: all cores)' -r
complete -c arl-train -n "__fish_arl_train_using_subcommand values" -s i -l input -d 'Input file (JSONL or Parquet, detected from content); repeat for several; `-` or none reads stdin' -r -F
complete -c arl-train -n "__fish_arl_train_using_subcommand values" -l on-error -d 'What to do with a bad record: `fail` stops (exit 65, no output file), `skip` keeps going and writes it to `--rejects`' -r -f -a "fail\t'Stop with an error naming the record; write no output file'
skip\t'Keep going; put every bad record in the `--rejects` file'"
complete -c arl-train -n "__fish_arl_train_using_subcommand values" -l rejects -d 'File that receives every bad record (the original line verbatim for JSONL, the row as JSON for Parquet) when `--on-error skip`' -r -F
complete -c arl-train -n "__fish_arl_train_using_subcommand values" -s o -l output -d 'Output file, written atomically (temporary name, renamed when complete); none or `-` writes stdout' -r -F
complete -c arl-train -n "__fish_arl_train_using_subcommand values" -l format -d 'Output format; default: from the output\'s extension (`.parquet` → Parquet), JSONL otherwise and on stdout' -r -f -a "jsonl\t''
parquet\t''"
complete -c arl-train -n "__fish_arl_train_using_subcommand values" -l no-shared-prefix -d 'Run every sample\'s prompt on its own (by default samples that share their prompt run it once: the same values)'
complete -c arl-train -n "__fish_arl_train_using_subcommand values" -s q -l quiet -d 'No progress bar and no summary on stderr'
complete -c arl-train -n "__fish_arl_train_using_subcommand values" -s h -l help -d 'Print help (see more with \'--help\')'
complete -c arl-train -n "__fish_arl_train_using_subcommand convert" -l out -d 'The model directory to create (must not exist, or be empty)' -r -F
complete -c arl-train -n "__fish_arl_train_using_subcommand convert" -s h -l help -d 'Print help (see more with \'--help\')'
complete -c arl-train -n "__fish_arl_train_using_subcommand merge" -l model -d 'The adapter directory' -r -F
complete -c arl-train -n "__fish_arl_train_using_subcommand merge" -l base -d 'The base model (default: the adapter\'s `base_model_name_or_path`)' -r -F
complete -c arl-train -n "__fish_arl_train_using_subcommand merge" -l out -l save -d 'The merged model directory to write (replaced atomically)' -r -F
complete -c arl-train -n "__fish_arl_train_using_subcommand merge" -l dtype -d 'Tensor dtype of the written weights: `auto` is the base\'s `torch_dtype`' -r
complete -c arl-train -n "__fish_arl_train_using_subcommand merge" -s h -l help -d 'Print help (see more with \'--help\')'
complete -c arl-train -n "__fish_arl_train_using_subcommand render" -l model -d 'The model (or tokenizer) directory whose tokenizer and chat template render' -r -F
complete -c arl-train -n "__fish_arl_train_using_subcommand render" -l threads -d 'Threads that render (0: all cores)' -r
complete -c arl-train -n "__fish_arl_train_using_subcommand render" -s i -l input -d 'Input file (JSONL or Parquet, detected from content); repeat for several; `-` or none reads stdin' -r -F
complete -c arl-train -n "__fish_arl_train_using_subcommand render" -l on-error -d 'What to do with a bad record: `fail` stops (exit 65, no output file), `skip` keeps going and writes it to `--rejects`' -r -f -a "fail\t'Stop with an error naming the record; write no output file'
skip\t'Keep going; put every bad record in the `--rejects` file'"
complete -c arl-train -n "__fish_arl_train_using_subcommand render" -l rejects -d 'File that receives every bad record (the original line verbatim for JSONL, the row as JSON for Parquet) when `--on-error skip`' -r -F
complete -c arl-train -n "__fish_arl_train_using_subcommand render" -s o -l output -d 'Output file, written atomically (temporary name, renamed when complete); none or `-` writes stdout' -r -F
complete -c arl-train -n "__fish_arl_train_using_subcommand render" -l format -d 'Output format; default: from the output\'s extension (`.parquet` → Parquet), JSONL otherwise and on stdout' -r -f -a "jsonl\t''
parquet\t''"
complete -c arl-train -n "__fish_arl_train_using_subcommand render" -s q -l quiet -d 'No progress bar and no summary on stderr'
complete -c arl-train -n "__fish_arl_train_using_subcommand render" -s h -l help -d 'Print help (see more with \'--help\')'
complete -c arl-train -n "__fish_arl_train_using_subcommand help; and not __fish_seen_subcommand_from init make-tokenizer logprobs values convert merge render help" -f -a "init" -d 'Write a randomly initialised model (config + safetensors + tokenizer)'
complete -c arl-train -n "__fish_arl_train_using_subcommand help; and not __fish_seen_subcommand_from init make-tokenizer logprobs values convert merge render help" -f -a "make-tokenizer" -d 'Write arl\'s character-level test tokenizer (tokenizer.json, tokenizer_config.json)'
complete -c arl-train -n "__fish_arl_train_using_subcommand help; and not __fish_seen_subcommand_from init make-tokenizer logprobs values convert merge render help" -f -a "logprobs" -d 'Write `ref_log_probs` (each response token\'s log-prob under `--model`) into records'
complete -c arl-train -n "__fish_arl_train_using_subcommand help; and not __fish_seen_subcommand_from init make-tokenizer logprobs values convert merge render help" -f -a "values" -d 'Write `values` (PPO\'s critic: each response token\'s value under `--critic`) into records'
complete -c arl-train -n "__fish_arl_train_using_subcommand help; and not __fish_seen_subcommand_from init make-tokenizer logprobs values convert merge render help" -f -a "convert" -d 'Convert a GGUF model (llama.cpp\'s format) into a Hugging Face model directory'
complete -c arl-train -n "__fish_arl_train_using_subcommand help; and not __fish_seen_subcommand_from init make-tokenizer logprobs values convert merge render help" -f -a "merge" -d 'Fold a LoRA adapter into its base model: an ordinary checkpoint any server loads'
complete -c arl-train -n "__fish_arl_train_using_subcommand help; and not __fish_seen_subcommand_from init make-tokenizer logprobs values convert merge render help" -f -a "render" -d 'Render SFT demonstrations (`messages`) into `tokens`, `prompt_len` and `loss_mask` once'
complete -c arl-train -n "__fish_arl_train_using_subcommand help; and not __fish_seen_subcommand_from init make-tokenizer logprobs values convert merge render help" -f -a "help" -d 'Print this message or the help of the given subcommand(s)'
