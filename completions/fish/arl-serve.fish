complete -c arl-serve -l model-path -d 'Model directory (config.json, safetensors, tokenizer.json)' -r -F
complete -c arl-serve -l tokenizer-path -d 'Tokenizer directory; default: `--model-path`' -r -F
complete -c arl-serve -l device -d 'Device: `auto` (CUDA when available), `cpu`, `cuda`, `cuda:N`' -r
complete -c arl-serve -l dtype -d 'Weight dtype: `auto` (float32 on CPU; the checkpoint\'s dtype, else bfloat16, on CUDA), `float32`, `bfloat16`, `float16`' -r
complete -c arl-serve -l cpu-matmul -d 'CPU float32 matrix multiplies: `auto` (oneDNN when it measures faster at load), `onednn`, `blas`' -r
complete -c arl-serve -l decode-matmul -d 'CPU float32 decode matrix products (≤64 rows): `auto` (measured at load), `blas`, `float32`, `bf16`' -r
complete -c arl-serve -l weight-version -d 'Weight version reported until the first update (`/get_model_info`, `meta_info.weight_version`)' -r
complete -c arl-serve -l served-model-name -d 'Model name in `/v1/models` and chat responses; default: `--model-path`' -r
complete -c arl-serve -l lora-paths -d 'LoRA adapters served from the start: `NAME=DIR` or `DIR` (named DIR); requests pick one by `lora_path`' -r
complete -c arl-serve -l scripted -d 'TEST DOUBLE: answer from a JSONL file of scripted completions (`{"completion": TEXT, "when"?: SUBSTRING, "token_delay_ms"?: MS}`; the entry whose `when` occurs latest in the prompt wins, else entries without `when` in turn; a decode step holding a completion with `token_delay_ms` takes that long), tokenised with the model\'s tokenizer, instead of running the model. Only the tokenizer and config of `--model-path` are read' -r -F
complete -c arl-serve -l tool-call-parser -d 'How the model writes tool calls (SGLang\'s names): `qwen25` (also `qwen`, `hermes`), `llama3`, `mistral`' -r -f -a "qwen25\t'`<tool_call>{"name": …, "arguments": {…}}</tool_call>` (Qwen2.5, Qwen3, Hermes)'
llama3\t'`{"name": …, "parameters": {…}}`, optionally after `<|python_tag|>`, `;` between calls (Llama 3.x)'
mistral\t'`[TOOL_CALLS] [{"name": …, "arguments": {…}}, …]` (Mistral)'"
complete -c arl-serve -l tool-header -d 'Tool header template for a chat template without a tool section (tools put in the system message)' -r -F
complete -c arl-serve -l tool-header-mode -d 'When the tool header is used: `auto` (the template has no tool section), `on`, `off`' -r -f -a "auto\t'When the chat template ignores `tools`'
on\t'Always, instead of the template\'s own tool section'
off\t'Never'"
complete -c arl-serve -l host -d 'Address to bind (loopback by default; `0.0.0.0` exposes the server)' -r
complete -c arl-serve -l port -d 'Port (0 picks a free one; the bound address is printed on stderr)' -r
complete -c arl-serve -l api-key -d 'Require `Authorization: Bearer KEY` on every route but `/health`' -r
complete -c arl-serve -l max-body-bytes -d 'Largest request body accepted, in bytes (larger ones get HTTP 413)' -r
complete -c arl-serve -l read-timeout -d 'Seconds a client has to send a request\'s headers, and then its body; a connection that stalls longer is closed (a body that stalls gets HTTP 408), so stalled clients cannot pile up. Generation time does not count' -r
complete -c arl-serve -l max-running-requests -d 'Sequences decoded together at most; more requests wait in a queue' -r
complete -c arl-serve -l max-prefill-tokens -d 'Prompts admitted together are prefilled in one batched forward of at most this many (padded) tokens; a longer prompt is prefilled alone' -r
complete -c arl-serve -l prefix-cache-slots -d 'Prefix cache: at most this many finished sequences\' KV caches are kept for reuse (they only take slots no running sequence needs; the least recently used goes first); running sequences are always sources. 0 turns the cache off' -r
complete -c arl-serve -l random-seed -d 'Seed for requests without `sampling_seed`; default: from the clock' -r
complete -c arl-serve -l dp-size -d 'Data-parallel replicas (SGLang\'s `--dp-size`): this many copies of the model, each with its own scheduler, KV cache and batch, behind one port; a new request goes to the least loaded. On CUDA replica i runs on `cuda:(N+i)` for `--device cuda:N`; on the CPU the replicas share the cores (by default `cores / dp-size` libtorch threads each, and one for models under 20M parameters: two replicas on two cores decode about 1.5x the tokens per second of one on the test model)' -r
complete -c arl-serve -l cpu-threads -d 'Intra-op CPU threads for libtorch. Default on the CPU: 1 for models under 20M parameters (their decode-step kernels are too small to split: one thread was 1.3-1.4x faster than two on the test and demo models, and leaves the other cores to the rollout), otherwise libtorch\'s own choice' -r
complete -c arl-serve -l log-level -d 'Log level on stderr (SGLang\'s `--log-level`): `error`, `warn`, `info` (weight updates, aborts), `debug` (every request as it ends: rid, prompt and generated tokens, how it ended, latency), `trace`' -r -f -a "error\t''
warn\t''
info\t''
debug\t''
trace\t''"
complete -c arl-serve -l disable-radix-cache -d 'No prefix cache (SGLang\'s flag; the same as `--prefix-cache-slots 0` and no sharing between running sequences)'
complete -c arl-serve -l log-requests -d 'Log every request as it ends at `info` (SGLang\'s `--log-requests`)'
complete -c arl-serve -s h -l help -d 'Print help (see more with \'--help\')'
complete -c arl-serve -s V -l version -d 'Print version'
