complete -c arl-tasks -s n -l count -d 'Number of tasks' -r
complete -c arl-tasks -l seed -d 'Seed; task i depends only on (family, seed, i, level)' -r
complete -c arl-tasks -l start -d 'First task index (to continue a sequence)' -r
complete -c arl-tasks -l difficulty -d 'Level 1–10, or `auto` (needs `--history`)' -r
complete -c arl-tasks -l history -d 'Earlier scored trajectory files (JSONL or Parquet) for `--difficulty auto`' -r -F
complete -c arl-tasks -l band-low -d 'auto: move down at or below this accuracy' -r
complete -c arl-tasks -l band-high -d 'auto: move up at or above this accuracy' -r
complete -c arl-tasks -l min-samples -d 'auto: scored samples the current level needs before it moves' -r
complete -c arl-tasks -l noise -d 'arith: share of demonstrations that skip the calculator and guess a plausible wrong number (`metadata.noisy`), for noisy SFT data; with `--mixed`, of the hard problems only' -r
complete -c arl-tasks -l easy-level -d 'arith with `--mixed`: highest level counted easy. Level 1 (the 81 one-digit sums) is what a small model learns by heart, so that answering without the tool is really the better choice there' -r
complete -c arl-tasks -l easy-tool-rate -d 'arith with `--mixed`: share of easy demonstrations that call the calculator anyway (SFT data for a policy that over-uses the tool)' -r
complete -c arl-tasks -l tool-cost -d 'arith: cost per tool call, written to `metadata.tool_cost`; `arl-reward` subtracts cost × `tool_calls` from the reward' -r
complete -c arl-tasks -l game -d 'arena: the game (`tictactoe`: 3x3, three in a row; `connect4`: 7x6, four in a row)' -r -f -a "tictactoe\t''
connect4\t''"
complete -c arl-tasks -s o -l output -d 'Output file, written atomically (temporary name, renamed when complete); none or `-` writes stdout' -r -F
complete -c arl-tasks -l format -d 'Output format; default: from the output\'s extension (`.parquet` → Parquet), JSONL otherwise and on stdout' -r -f -a "jsonl\t''
parquet\t''"
complete -c arl-tasks -l with-solutions -d 'Add the reference solution (`response`, `messages`)'
complete -c arl-tasks -l mixed -d 'arith: half easy problems (levels 1..=`--easy-level`, answered without the tool in solutions), half hard ones (the level, at least 5); `metadata.kind`'
complete -c arl-tasks -s q -l quiet -d 'No summary on stderr'
complete -c arl-tasks -s h -l help -d 'Print help (see more with \'--help\')'
complete -c arl-tasks -s V -l version -d 'Print version'
