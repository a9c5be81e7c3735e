complete -c arl-rollout -s i -l input -d 'Input file (JSONL or Parquet, detected from content); repeat for several; `-` or none reads stdin' -r -F
complete -c arl-rollout -l on-error -d 'What to do with a bad record: `fail` stops (exit 65, no output file), `skip` keeps going and writes it to `--rejects`' -r -f -a "fail\t'Stop with an error naming the record; write no output file'
skip\t'Keep going; put every bad record in the `--rejects` file'"
complete -c arl-rollout -l rejects -d 'File that receives every bad record (the original line verbatim for JSONL, the row as JSON for Parquet) when `--on-error skip`' -r -F
complete -c arl-rollout -s o -l output -d 'Output file, written atomically (temporary name, renamed when complete); none or `-` writes stdout' -r -F
complete -c arl-rollout -l format -d 'Output format; default: from the output\'s extension (`.parquet` → Parquet), JSONL otherwise and on stdout' -r -f -a "jsonl\t''
parquet\t''"
complete -c arl-rollout -l prompt-key -d 'Column holding the prompt (text or chat messages); dots reach into objects' -r
complete -c arl-rollout -l label-key -d 'Column holding the ground truth; default: `label`, else `reward_model.ground_truth`' -r
complete -c arl-rollout -l trace -d 'Write a timeline of the run to FILE (JSONL, one event a line): per sample, when each `/generate` request was queued for a `--concurrency` slot, sent and answered, each tool call\'s duration, retries (and the wait before them) and aborts; times in seconds from the run\'s start, whose wall-clock time the first line gives. Draw it and see where the time went with `arl-inspect trace FILE`' -r -F
complete -c arl-rollout -l endpoint -d 'SGLang server URL; repeat for several (groups are spread over them, least-loaded first; a group\'s turns stay on one server for prefix-cache reuse). Default: http://127.0.0.1:30000' -r
complete -c arl-rollout -l router -d 'An sgl-router URL instead of `--endpoint`s: requests go through it; aborts go to every worker it lists (`GET /workers`, else `/list_workers`)' -r
complete -c arl-rollout -l api-key -d 'Sent as `Authorization: Bearer KEY`' -r
complete -c arl-rollout -l concurrency -d 'Most `/generate` requests in flight at once' -r
complete -c arl-rollout -l request-timeout -d 'Timeout of one `/generate` request, in seconds' -r
complete -c arl-rollout -l max-retries -d 'Retries of a failed request (connection error, timeout, HTTP 408/429/5xx) before the run fails' -r
complete -c arl-rollout -l retry-backoff -d 'First retry delay in seconds; doubles per retry, capped at 10 s' -r
complete -c arl-rollout -l lora -d 'LoRA adapter to generate with: every `/generate` request names it in `lora_path` (SGLang\'s field; the server must have it loaded, e.g. `arl-serve --lora-paths NAME=DIR` or `arl-sync --lora NAME`), so the recorded log-probs are the adapter\'s. Default: the base model. `--opponent-endpoint`\'s requests do not name it' -r
complete -c arl-rollout -l tokenizer -d 'Model or tokenizer directory: `tokenizer.json`, the chat template (`chat_template.jinja`, else `chat_template` in `tokenizer_config.json`), `eos_token`, and the end-of-sequence ids of `generation_config.json`' -r -F
complete -c arl-rollout -l system -d 'System message put first when a prompt has none' -r
complete -c arl-rollout -l chat-template-kwargs -d 'Variables for the chat template, a JSON object (vLLM\'s and SGLang\'s `--chat-template-kwargs`), e.g. `{"enable_thinking": false}` for Qwen3; every rendering gets them, the tool turns included' -r
complete -c arl-rollout -l tool-call-parser -d 'How the model writes tool calls (SGLang\'s names): `qwen25` (also `qwen`, `hermes`), `llama3`, `mistral`' -r -f -a "qwen25\t'`<tool_call>{"name": …, "arguments": {…}}</tool_call>` (Qwen2.5, Qwen3, Hermes)'
llama3\t'`{"name": …, "parameters": {…}}`, optionally after `<|python_tag|>`, `;` between calls (Llama 3.x)'
mistral\t'`[TOOL_CALLS] [{"name": …, "arguments": {…}}, …]` (Mistral)'"
complete -c arl-rollout -l tool-header -d 'Tool header template for a chat template without a tool section (tools put in the system message)' -r -F
complete -c arl-rollout -l tool-header-mode -d 'When the tool header is used: `auto` (the template has no tool section), `on`, `off`' -r -f -a "auto\t'When the chat template ignores `tools`'
on\t'Always, instead of the template\'s own tool section'
off\t'Never'"
complete -c arl-rollout -s n -l n-samples-per-prompt -d 'Samples per prompt (the group size)' -r
complete -c arl-rollout -l temperature -d 'Sampling temperature' -r
complete -c arl-rollout -l top-p -d 'Nucleus sampling threshold' -r
complete -c arl-rollout -l top-k -d 'Top-k sampling; -1 = whole vocabulary' -r
complete -c arl-rollout -l max-new-tokens -d 'Most new tokens per turn; default: what is left of `--max-response-len`' -r
complete -c arl-rollout -l stop -d 'Stop string (repeatable)' -r
complete -c arl-rollout -l stop-token-ids -d 'Stop token id (repeatable)' -r
complete -c arl-rollout -l max-turns -d 'Most generation turns per episode' -r
complete -c arl-rollout -l max-response-len -d 'Most response tokens per episode, tool tokens included' -r
complete -c arl-rollout -l max-tool-output -d 'Most characters of one tool output; longer ones are cut in the middle' -r
complete -c arl-rollout -l env-config -d 'Per-record environments (JSON): named tool sets and limits, chosen by a record\'s `metadata.env` or its `data_source` (see `arl_rollout::env`)' -r -F
complete -c arl-rollout -l tools -d 'Built-in tools to offer, comma-separated: `calculator`, `python`, `sql` (queries the task\'s own database, built per episode from `metadata.sql_setup`)' -r
complete -c arl-rollout -l tool -d 'External tool: `sh -c COMMAND` gets `{"name", "arguments"}` as JSON on stdin and answers on stdout (`{"content": …}` or plain text); repeatable' -r
complete -c arl-rollout -l tool-spec -d 'JSON file with OpenAI tool definitions (a list) for `--tool`s, replacing their default schema (an object with any arguments)' -r -F
complete -c arl-rollout -l mcp -d 'MCP server over stdio (`sh -c COMMAND`); all its tools are offered; repeatable' -r
complete -c arl-rollout -l sandbox-url -d 'SandboxFusion URL for the `python` tool (e.g. http://127.0.0.1:8080); default: the local sandbox (Linux namespaces, rlimits; see `arl-reward`)' -r
complete -c arl-rollout -l sandbox-concurrency -d 'Most local sandbox runs at once; default: the number of CPUs' -r
complete -c arl-rollout -l openapi -d 'OpenAPI 3 spec (URL or JSON file): every operation becomes a tool named by its `operationId`, called over HTTP; with `x-arl-episodes` (as `arl-env` serves) each episode gets its own state, its id in `metadata.episode_id`' -r
complete -c arl-rollout -l web -d 'Web environment: the task site\'s URL (`arl-env`, e.g. http://127.0.0.1:8700); offers the browser tools `open`, `click`, `type`, `select`, `scroll`, `back` in a headless Chromium that reaches only this site; each episode gets its own site episode (from `metadata.web_setup`, id in `metadata.episode_id`) and browser context' -r
complete -c arl-rollout -l web-max-chars -d 'Web environment: most characters of one page observation' -r
complete -c arl-rollout -l chromium -d 'Web environment: the Chromium binary; default `$ARL_CHROMIUM`, else `chromium`, `chromium-browser` or `google-chrome` on PATH' -r -F
complete -c arl-rollout -l sql-url -d '`sql` tool: PostgreSQL admin URL (`postgres://USER@HOST:PORT/DB`); each episode gets its own schema and a role that can only read it. Default: an in-memory SQLite database per episode' -r
complete -c arl-rollout -l sql-timeout -d '`sql` tool: time limit of one query, seconds' -r
complete -c arl-rollout -l sql-max-rows -d '`sql` tool: most rows returned to the model' -r
complete -c arl-rollout -l tool-timeout -d 'Timeout of one tool call, in seconds' -r
complete -c arl-rollout -l batch-size -d 'Take the K-th batch of N prompts of a seeded shuffle, epoch after epoch (`prompt_id@<epoch>` from the second epoch on); default: every prompt once, in order' -r
complete -c arl-rollout -l step -d 'Which batch (with `--batch-size`), counted from 0' -r
complete -c arl-rollout -l seed -d 'Shuffle seed (with `--batch-size`)' -r
complete -c arl-rollout -l rm -d 'Score each trajectory inline with a rule reward of `arl-reward` (`math`, `exact`, `f1`), for single-process use; piping into `arl-reward` is the general form (sandboxed code tests, remote and plug-in rewards, shaping) (`game` scores arena games from their result with `arl-reward --rm game`\'s defaults)' -r -f -a "math\t''
exact\t''
f1\t''
game\t''"
complete -c arl-rollout -l opponent-endpoint -d 'Arena: seat `o` is played by the policy behind this server (same tokenizer) instead of by the `--endpoint` policy itself (self-play); its records say `metadata.arena.player` = `opponent`' -r
complete -c arl-rollout -l illegal-retries -d 'Arena: refused attempts a seat may retry per move before it forfeits (0: the first illegal move forfeits)' -r
complete -c arl-rollout -l target-groups -d 'Over-sampling: stop when N groups are complete and abort the remaining requests (`/abort_request`); unfinished groups are not written' -r
complete -c arl-rollout -s q -l quiet -d 'No progress bar and no summary on stderr'
complete -c arl-rollout -l resume -d 'Continue an interrupted run: keep the complete groups of `-o FILE`\'s `FILE.partial` (or of FILE) and skip their `prompt_id`s'
complete -c arl-rollout -l no-chat-template -d 'Tokenise the prompt text as is, without the chat template (no tools)'
complete -c arl-rollout -l python-stateful -d '`python` keeps variables across calls within an episode, like a notebook kernel'
complete -c arl-rollout -l arena -d 'Arena mode: the input records are game tasks (`arl-tasks arena`: `metadata.game` = `tictactoe` or `connect4`, optional `metadata.opening` moves); each of the `-n` samples is one game between two seats, `x` (moves first) and `o`, playing in turn with the `move` tool (`{"cell": 1-9}` or `{"column": 1-7}`). Every game gives two records, `prompt_id` `<task id>:x` and `<task id>:o` (each seat\'s games form a group), `sample_index` the game, linked by `metadata.episode_id`, with the result in `metadata.arena` (seat, opponent, result, winner, reason, moves, final board); score them with `arl-reward --rm game`. A turn must hold exactly one legal `move` call; anything else is refused with an observation saying why, and after `--illegal-retries` refused attempts at one move the seat forfeits (as it does when its `--max-response-len` runs out). `--max-turns` and tool flags do not apply'
complete -c arl-rollout -s h -l help -d 'Print help (see more with \'--help\')'
complete -c arl-rollout -s V -l version -d 'Print version'
