complete -c arl-reward -l rm -d 'Reward function' -r -f -a "math\t'Last `\\boxed{}` or `Answer:` line, normalised, compared by value; hedged answers score 0'
exact\t'The answer part equals the label (or one of a list of labels)'
f1\t'SQuAD token F1 of the answer part against the label(s)'
regex\t'`--weight` when the response matches `--pattern` (a format reward)'
code\t'Run the last fenced code block against the label\'s tests in the sandbox; fraction passed'
remote\t'POST {prompt, response, label} to `--url`; the answer is a number or {"reward", "detail"}'
sql\t'Execution match: the response\'s query (last ```sql block, else last `sql` tool call) returns the same rows as `label.gold` on the task\'s database'
api\t'Goal check in an OpenAPI environment service (`arl-env`): the state of the trajectory\'s `metadata.episode_id`, or a replay of the response\'s tool calls'
web\t'Goal check on the web task site (`arl-env`): the state of the trajectory\'s `metadata.episode_id`, or a replay of the response\'s browser calls in headless Chromium'
cmd\t'An external program: JSONL records in, one `{"reward", "detail"}` (or number) line out per record'
bfcl\t'Tool calls scored by the rules of BFCL\'s AST checker against `label.ground_truth` (`arl-tasks import bfcl:CATEGORY`); the no-call categories score 1 with no call'
game\t'The result of an arena game (`metadata.arena.result` of `arl-rollout --arena`): `--game-win`, `--game-draw`, `--game-loss`, `--game-forfeit`'
arena\t'Tournament-ranked rewards: the samples of each prompt meet in a `--arena round-robin` or `elimination` tournament decided by `--judge`'
auto\t'Choose per record by `data_source` (`--map`, `--default-rm`)'"
complete -c arl-reward -l map -d 'With `--rm auto`: route `data_source` SRC to reward NAME (repeatable)' -r
complete -c arl-reward -l default-rm -d 'With `--rm auto`: the reward for a `data_source` not in the mapping (default: none, such records are errors)' -r -f -a "math\t'Last `\\boxed{}` or `Answer:` line, normalised, compared by value; hedged answers score 0'
exact\t'The answer part equals the label (or one of a list of labels)'
f1\t'SQuAD token F1 of the answer part against the label(s)'
regex\t'`--weight` when the response matches `--pattern` (a format reward)'
code\t'Run the last fenced code block against the label\'s tests in the sandbox; fraction passed'
remote\t'POST {prompt, response, label} to `--url`; the answer is a number or {"reward", "detail"}'
sql\t'Execution match: the response\'s query (last ```sql block, else last `sql` tool call) returns the same rows as `label.gold` on the task\'s database'
api\t'Goal check in an OpenAPI environment service (`arl-env`): the state of the trajectory\'s `metadata.episode_id`, or a replay of the response\'s tool calls'
web\t'Goal check on the web task site (`arl-env`): the state of the trajectory\'s `metadata.episode_id`, or a replay of the response\'s browser calls in headless Chromium'
cmd\t'An external program: JSONL records in, one `{"reward", "detail"}` (or number) line out per record'
bfcl\t'Tool calls scored by the rules of BFCL\'s AST checker against `label.ground_truth` (`arl-tasks import bfcl:CATEGORY`); the no-call categories score 1 with no call'
game\t'The result of an arena game (`metadata.arena.result` of `arl-rollout --arena`): `--game-win`, `--game-draw`, `--game-loss`, `--game-forfeit`'
arena\t'Tournament-ranked rewards: the samples of each prompt meet in a `--arena round-robin` or `elimination` tournament decided by `--judge`'
auto\t'Choose per record by `data_source` (`--map`, `--default-rm`)'"
complete -c arl-reward -l tolerance -d 'math: relative tolerance for numbers (0 = exact comparison of rationals)' -r
complete -c arl-reward -l last-number-credit -d 'math: partial credit W (0 < W < 1) for a response with neither `\\boxed{}` nor an `Answer:` line whose last number equals the label — a denser reward for a model that answers in its own words; accuracy (`reward_detail.score` ≥ 1) counts full credit only' -r
complete -c arl-reward -l pattern -d 'regex: the pattern (Rust regex syntax)' -r
complete -c arl-reward -l weight -d 'regex: the reward for a match' -r
complete -c arl-reward -l test-timeout -d 'code: time limit of one test or one stdin/stdout case, seconds' -r
complete -c arl-reward -l memory-mb -d 'code: memory limit of the sandbox (address space), MiB' -r
complete -c arl-reward -l sandbox-fusion-url -d 'code: run tests in a SandboxFusion server (base URL or the full `/run_code` URL) instead of the local sandbox' -r
complete -c arl-reward -l sandbox -d 'code: how strict the local sandbox is: `auto` runs on bare namespaces (with a warning) where bubblewrap cannot be used, `strict` refuses to run there (exit 1), `namespaces` uses that fallback even where bubblewrap works' -r -f -a "auto\t'Bubblewrap when it works here, else bare namespaces (+ Landlock), said on stderr and in `reward_detail.sandbox`'
strict\t'Bubblewrap, or refuse to run (exit 1) before reading any record'
namespaces\t'Bare namespaces (+ Landlock) even where bubblewrap works'"
complete -c arl-reward -l concurrency -d 'Records (or sandboxes) scored at once, for rewards that wait (code, remote)' -r
complete -c arl-reward -l url -d 'remote: the scorer\'s URL' -r
complete -c arl-reward -l timeout -d 'remote (and SandboxFusion): timeout of one request, seconds' -r
complete -c arl-reward -l retries -d 'remote (and SandboxFusion): attempts per request (transport errors and HTTP 5xx are retried)' -r
complete -c arl-reward -l tool-call-parser -d 'sql, api, web: how the model wrote its tool calls (SGLang\'s names, as given to `arl-rollout`): `qwen25` (also `qwen`, `hermes`), `llama3`, `mistral`' -r -f -a "qwen25\t'`<tool_call>{"name": …, "arguments": {…}}</tool_call>` (Qwen2.5, Qwen3, Hermes)'
llama3\t'`{"name": …, "parameters": {…}}`, optionally after `<|python_tag|>`, `;` between calls (Llama 3.x)'
mistral\t'`[TOOL_CALLS] [{"name": …, "arguments": {…}}, …]` (Mistral)'"
complete -c arl-reward -l sql-url -d 'sql: PostgreSQL admin URL; each record gets its own schema and a read-only role (default: an in-memory SQLite database per record)' -r
complete -c arl-reward -l sql-timeout -d 'sql: time limit of one query, seconds' -r
complete -c arl-reward -l openapi -d 'api: the service\'s OpenAPI spec (URL or file), as given to `arl-rollout --openapi`' -r
complete -c arl-reward -l cmd -d 'cmd: the program, run with `sh -c`' -r
complete -c arl-reward -l max-response-len -d 'DAPO soft overlong punishment: the response length limit, tokens (`len(tokens) - prompt_len`); off when not given' -r
complete -c arl-reward -l overlong-buffer -d 'DAPO: the penalty grows linearly over the last TOKENS before `--max-response-len`' -r
complete -c arl-reward -l overlong-penalty-factor -d 'DAPO: the penalty at and beyond `--max-response-len`' -r
complete -c arl-reward -l format-bonus -d 'Format bonus: added when the response matches `--format-pattern`' -r
complete -c arl-reward -l format-pattern -d 'Format bonus: the pattern (e.g. `(?s)<think>.*</think>.*\\\\boxed`)' -r
complete -c arl-reward -l game-win -d 'game: the reward of a win' -r
complete -c arl-reward -l game-draw -d 'game: the reward of a draw' -r
complete -c arl-reward -l game-loss -d 'game: the reward of a loss' -r
complete -c arl-reward -l game-forfeit -d 'game: the reward of a loss by this seat\'s forfeit; default: `--game-loss`' -r
complete -c arl-reward -l arena -d 'arena: the tournament format' -r -f -a "round-robin\t'Every pair meets once; reward = win rate'
elimination\t'Single-elimination bracket; reward = rounds advanced / rounds'"
complete -c arl-reward -l judge -d 'arena: who decides a match' -r -f -a "longer\t'The longer response wins (characters); equal lengths tie'
shorter\t'The shorter response wins'
score\t'The higher base score of `--judge-rm` (against the label) wins'
cmd\t'An external program (`--judge-cmd`)'
model\t'A model behind an OpenAI-style endpoint (`--judge-url`)'"
complete -c arl-reward -l judge-rm -d 'arena, `--judge score`: the reward function whose base score decides (math, exact, f1, regex)' -r -f -a "math\t'Last `\\boxed{}` or `Answer:` line, normalised, compared by value; hedged answers score 0'
exact\t'The answer part equals the label (or one of a list of labels)'
f1\t'SQuAD token F1 of the answer part against the label(s)'
regex\t'`--weight` when the response matches `--pattern` (a format reward)'
code\t'Run the last fenced code block against the label\'s tests in the sandbox; fraction passed'
remote\t'POST {prompt, response, label} to `--url`; the answer is a number or {"reward", "detail"}'
sql\t'Execution match: the response\'s query (last ```sql block, else last `sql` tool call) returns the same rows as `label.gold` on the task\'s database'
api\t'Goal check in an OpenAPI environment service (`arl-env`): the state of the trajectory\'s `metadata.episode_id`, or a replay of the response\'s tool calls'
web\t'Goal check on the web task site (`arl-env`): the state of the trajectory\'s `metadata.episode_id`, or a replay of the response\'s browser calls in headless Chromium'
cmd\t'An external program: JSONL records in, one `{"reward", "detail"}` (or number) line out per record'
bfcl\t'Tool calls scored by the rules of BFCL\'s AST checker against `label.ground_truth` (`arl-tasks import bfcl:CATEGORY`); the no-call categories score 1 with no call'
game\t'The result of an arena game (`metadata.arena.result` of `arl-rollout --arena`): `--game-win`, `--game-draw`, `--game-loss`, `--game-forfeit`'
arena\t'Tournament-ranked rewards: the samples of each prompt meet in a `--arena round-robin` or `elimination` tournament decided by `--judge`'
auto\t'Choose per record by `data_source` (`--map`, `--default-rm`)'"
complete -c arl-reward -l judge-cmd -d 'arena, `--judge cmd`: the judge program, run once with `sh -c`' -r
complete -c arl-reward -l judge-url -d 'arena, `--judge model`: the judge server (base URL, or the full `/v1/chat/completions` URL)' -r
complete -c arl-reward -l judge-model -d 'arena, `--judge model`: the `model` field of the request' -r
complete -c arl-reward -l judge-max-tokens -d 'arena, `--judge model`: most tokens of the judge\'s reply' -r
complete -c arl-reward -l judge-api-key -d 'arena, `--judge model`: sent as `Authorization: Bearer KEY`' -r
complete -c arl-reward -l arena-seed -d 'arena: seed of the elimination tie-break coins' -r
complete -c arl-reward -l web -d 'web: the task site\'s URL (`arl-env`), as given to `arl-rollout --web`' -r
complete -c arl-reward -l chromium -d 'web: the Chromium binary for replays; default `$ARL_CHROMIUM`, else `chromium`, `chromium-browser` or `google-chrome` on PATH' -r -F
complete -c arl-reward -s i -l input -d 'Input file (JSONL or Parquet, detected from content); repeat for several; `-` or none reads stdin' -r -F
complete -c arl-reward -l on-error -d 'What to do with a bad record: `fail` stops (exit 65, no output file), `skip` keeps going and writes it to `--rejects`' -r -f -a "fail\t'Stop with an error naming the record; write no output file'
skip\t'Keep going; put every bad record in the `--rejects` file'"
complete -c arl-reward -l rejects -d 'File that receives every bad record (the original line verbatim for JSONL, the row as JSON for Parquet) when `--on-error skip`' -r -F
complete -c arl-reward -s o -l output -d 'Output file, written atomically (temporary name, renamed when complete); none or `-` writes stdout' -r -F
complete -c arl-reward -l format -d 'Output format; default: from the output\'s extension (`.parquet` → Parquet), JSONL otherwise and on stdout' -r -f -a "jsonl\t''
parquet\t''"
complete -c arl-reward -l explain -d 'Print to stderr, per record, a short account of why it got its reward'
complete -c arl-reward -l timings -d 'Print the time spent reading, scoring and writing on stderr'
complete -c arl-reward -l by-group -d 'cmd: send one group (records sharing `prompt_id`) per line as a JSON array; the program answers one JSON array of rewards per group'
complete -c arl-reward -l judge-swap -d 'arena, `--judge model`: ask both orders (A/B and B/A); a verdict that flips is a tie'
complete -c arl-reward -l judge-strict -d 'arena: a judge error fails the run instead of counting as a tie'
complete -c arl-reward -s q -l quiet -d 'No progress bar and no summary on stderr'
complete -c arl-reward -s h -l help -d 'Print help (see more with \'--help\')'
complete -c arl-reward -s V -l version -d 'Print version'
