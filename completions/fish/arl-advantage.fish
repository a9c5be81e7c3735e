complete -c arl-advantage -l estimator -d 'Advantage estimator' -r -f -a "grpo\t'(r − group mean) / (group std + 1e-6), Bessel std (DeepSeekMath); with `--no-std`, Dr.GRPO'
rloo\t'r − mean of the other samples in the group (Ahmadian et al. 2024)'
reinforce++\t'discounted returns of −kl_coef·KL per token plus the reward, whitened (Hu 2025)'
reinforce++-baseline\t'r − group mean − kl_coef·KL per token, whitened'
gae\t'generalised advantage estimation from `values` (Schulman et al. 2016)'"
complete -c arl-advantage -l gamma -d 'Discount factor γ (reinforce++ returns, gae)' -r
complete -c arl-advantage -l lambda -d 'GAE λ' -r
complete -c arl-advantage -l gae-impl -d 'gae: `vanilla` reverse scan, or `chunked` (slime\'s blocks of `--chunk` tokens in triangular-matrix form); both agree to 1e-5' -r -f -a "vanilla\t''
chunked\t''"
complete -c arl-advantage -l chunk -d 'Block length of the chunked GAE' -r
complete -c arl-advantage -l kl-coef -d 'KL reward shaping: subtract kl_coef·KL on every trained token (reinforce++, reinforce++-baseline, gae); 0 turns it off. grpo and rloo put KL in the loss instead (arl-train)' -r
complete -c arl-advantage -l kl-estimator -d 'KL estimator from `rollout_log_probs` (log p) and `ref_log_probs` (log p_ref): k1 = log p − log p_ref; k2 = (log p − log p_ref)²/2; k3 = e^(log p_ref − log p) − 1 − (log p_ref − log p); low_var_kl = k3 clamped to ±10' -r -f -a "k1\t'`log p - log p_ref`'
k2\t'`(log p - log p_ref)^2 / 2`'
k3\t'`exp(log p_ref - log p) - 1 - (log p_ref - log p)`'
low_var_kl\t'k3 clamped to ±10'"
complete -c arl-advantage -l group-size -d 'Expected group size: each group is written as soon as it has N records; a group of another size is an error (bad records) unless `--allow-uneven`' -r
complete -c arl-advantage -s i -l input -d 'Input file (JSONL or Parquet, detected from content); repeat for several; `-` or none reads stdin' -r -F
complete -c arl-advantage -l on-error -d 'What to do with a bad record: `fail` stops (exit 65, no output file), `skip` keeps going and writes it to `--rejects`' -r -f -a "fail\t'Stop with an error naming the record; write no output file'
skip\t'Keep going; put every bad record in the `--rejects` file'"
complete -c arl-advantage -l rejects -d 'File that receives every bad record (the original line verbatim for JSONL, the row as JSON for Parquet) when `--on-error skip`' -r -F
complete -c arl-advantage -s o -l output -d 'Output file, written atomically (temporary name, renamed when complete); none or `-` writes stdout' -r -F
complete -c arl-advantage -l format -d 'Output format; default: from the output\'s extension (`.parquet` → Parquet), JSONL otherwise and on stdout' -r -f -a "jsonl\t''
parquet\t''"
complete -c arl-advantage -l no-std -d 'grpo: do not divide by the group\'s std (Dr.GRPO: reward minus the group mean)'
complete -c arl-advantage -l normalize -d 'Whiten the advantages over the whole batch: (A − mean) / sqrt(var + 1e-8) with the mean and unbiased variance over trained tokens only. Default: on for reinforce++ and reinforce++-baseline, off otherwise. Holds the whole batch in memory: nothing is written before the input ends'
complete -c arl-advantage -l no-normalize -d 'Do not whiten over the batch'
complete -c arl-advantage -l allow-uneven -d 'With `--group-size`: keep groups that end up smaller (written when the input ends), each normalised on its own'
complete -c arl-advantage -l timings -d 'Print the time spent reading, computing and writing, and the compute step\'s throughput in response tokens/s, on stderr'
complete -c arl-advantage -s q -l quiet -d 'No progress bar and no summary on stderr'
complete -c arl-advantage -s h -l help -d 'Print help (see more with \'--help\')'
complete -c arl-advantage -s V -l version -d 'Print version'
