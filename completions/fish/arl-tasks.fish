# Print an optspec for argparse to handle cmd's options that are independent of any subcommand.
function __fish_arl_tasks_global_optspecs
    string join \n n/count= seed= start= difficulty= history= band-low= band-high= min-samples= with-solutions underscore-names noise= mixed easy-level= easy-tool-rate= tool-cost= game= q/quiet o/output= format= h/help V/version
end

function __fish_arl_tasks_needs_command
    # Figure out if the current invocation already has a command.
    set -l cmd (commandline -opc)
    set -e cmd[1]
    argparse -s (__fish_arl_tasks_global_optspecs) -- $cmd 2>/dev/null
    or return
    if set -q argv[1]
        # Also print the command, so this can be used to figure out what it is.
        echo $argv[1]
        return 1
    end
    return 0
end

function __fish_arl_tasks_using_subcommand
    set -l cmd (__fish_arl_tasks_needs_command)
    test -z "$cmd"
    and return 1
    contains -- $cmd[1] $argv
end

complete -c arl-tasks -n "__fish_arl_tasks_needs_command" -s n -l count -d 'Number of tasks' -r
complete -c arl-tasks -n "__fish_arl_tasks_needs_command" -l seed -d 'Seed; task i depends only on (family, seed, i, level)' -r
complete -c arl-tasks -n "__fish_arl_tasks_needs_command" -l start -d 'First task index (to continue a sequence)' -r
complete -c arl-tasks -n "__fish_arl_tasks_needs_command" -l difficulty -d 'Level 1–10, or `auto` (needs `--history`)' -r
complete -c arl-tasks -n "__fish_arl_tasks_needs_command" -l history -d 'Earlier scored trajectory files (JSONL or Parquet) for `--difficulty auto`' -r -F
complete -c arl-tasks -n "__fish_arl_tasks_needs_command" -l band-low -d 'auto: move down at or below this accuracy' -r
complete -c arl-tasks -n "__fish_arl_tasks_needs_command" -l band-high -d 'auto: move up at or above this accuracy' -r
complete -c arl-tasks -n "__fish_arl_tasks_needs_command" -l min-samples -d 'auto: scored samples the current level needs before it moves' -r
complete -c arl-tasks -n "__fish_arl_tasks_needs_command" -l noise -d 'arith: share of demonstrations that skip the calculator and guess a plausible wrong number (`metadata.noisy`), for noisy SFT data; with `--mixed`, of the hard problems only' -r
complete -c arl-tasks -n "__fish_arl_tasks_needs_command" -l easy-level -d 'arith with `--mixed`: highest level counted easy. Level 1 (the 81 one-digit sums) is what a small model learns by heart, so that answering without the tool is really the better choice there' -r
complete -c arl-tasks -n "__fish_arl_tasks_needs_command" -l easy-tool-rate -d 'arith with `--mixed`: share of easy demonstrations that call the calculator anyway (SFT data for a policy that over-uses the tool)' -r
complete -c arl-tasks -n "__fish_arl_tasks_needs_command" -l tool-cost -d 'arith: cost per tool call, written to `metadata.tool_cost`; `arl-reward` subtracts cost × `tool_calls` from the reward' -r
complete -c arl-tasks -n "__fish_arl_tasks_needs_command" -l game -d 'arena: the game (`tictactoe`: 3x3, three in a row; `connect4`: 7x6, four in a row)' -r -f -a "tictactoe\t''
connect4\t''"
complete -c arl-tasks -n "__fish_arl_tasks_needs_command" -s o -l output -d 'Output file, written atomically (temporary name, renamed when complete); none or `-` writes stdout' -r -F
complete -c arl-tasks -n "__fish_arl_tasks_needs_command" -l format -d 'Output format; default: from the output\'s extension (`.parquet` → Parquet), JSONL otherwise and on stdout' -r -f -a "jsonl\t''
parquet\t''"
complete -c arl-tasks -n "__fish_arl_tasks_needs_command" -l with-solutions -d 'Add the reference solution (`response`, `messages`; BFCL: `response` only)'
complete -c arl-tasks -n "__fish_arl_tasks_needs_command" -l underscore-names -d 'BFCL: offer function names with `.` written `_` (BFCL\'s mode for models whose tool names cannot hold a dot; `--rm bfcl` then expects the `_` form)'
complete -c arl-tasks -n "__fish_arl_tasks_needs_command" -l mixed -d 'arith: half easy problems (levels 1..=`--easy-level`, answered without the tool in solutions), half hard ones (the level, at least 5); `metadata.kind`'
complete -c arl-tasks -n "__fish_arl_tasks_needs_command" -s q -l quiet -d 'No summary on stderr'
complete -c arl-tasks -n "__fish_arl_tasks_needs_command" -s h -l help -d 'Print help (see more with \'--help\')'
complete -c arl-tasks -n "__fish_arl_tasks_needs_command" -s V -l version -d 'Print version'
complete -c arl-tasks -n "__fish_arl_tasks_needs_command" -a "import" -d 'Read a standard benchmark into prompt records'
complete -c arl-tasks -n "__fish_arl_tasks_needs_command" -a "help" -d 'Print this message or the help of the given subcommand(s)'
complete -c arl-tasks -n "__fish_arl_tasks_using_subcommand import" -l data -d 'The unpacked benchmark files [default: $ARL_BENCHMARKS, else $ARL_CACHE/benchmarks]' -r -F
complete -c arl-tasks -n "__fish_arl_tasks_using_subcommand import" -s n -l limit -d 'Only the first N items' -r
complete -c arl-tasks -n "__fish_arl_tasks_using_subcommand import" -s o -l output -d 'Output file, written atomically (temporary name, renamed when complete); none or `-` writes stdout' -r -F
complete -c arl-tasks -n "__fish_arl_tasks_using_subcommand import" -l format -d 'Output format; default: from the output\'s extension (`.parquet` → Parquet), JSONL otherwise and on stdout' -r -f -a "jsonl\t''
parquet\t''"
complete -c arl-tasks -n "__fish_arl_tasks_using_subcommand import" -l with-solutions -d 'Add the reference solution (`response`, `messages`; BFCL: `response` only)'
complete -c arl-tasks -n "__fish_arl_tasks_using_subcommand import" -l underscore-names -d 'BFCL: offer function names with `.` written `_` (BFCL\'s mode for models whose tool names cannot hold a dot; `--rm bfcl` then expects the `_` form)'
complete -c arl-tasks -n "__fish_arl_tasks_using_subcommand import" -s q -l quiet -d 'No summary on stderr'
complete -c arl-tasks -n "__fish_arl_tasks_using_subcommand import" -s h -l help -d 'Print help (see more with \'--help\')'
complete -c arl-tasks -n "__fish_arl_tasks_using_subcommand help; and not __fish_seen_subcommand_from import help" -f -a "import" -d 'Read a standard benchmark into prompt records'
complete -c arl-tasks -n "__fish_arl_tasks_using_subcommand help; and not __fish_seen_subcommand_from import help" -f -a "help" -d 'Print this message or the help of the given subcommand(s)'
