# Print an optspec for argparse to handle cmd's options that are independent of any subcommand.
function __fish_arl_inspect_global_optspecs
    string join \n h/help V/version
end

function __fish_arl_inspect_needs_command
    # Figure out if the current invocation already has a command.
    set -l cmd (commandline -opc)
    set -e cmd[1]
    argparse -s (__fish_arl_inspect_global_optspecs) -- $cmd 2>/dev/null
    or return
    if set -q argv[1]
        # Also print the command, so this can be used to figure out what it is.
        echo $argv[1]
        return 1
    end
    return 0
end

function __fish_arl_inspect_using_subcommand
    set -l cmd (__fish_arl_inspect_needs_command)
    test -z "$cmd"
    and return 1
    contains -- $cmd[1] $argv
end

complete -c arl-inspect -n "__fish_arl_inspect_needs_command" -s h -l help -d 'Print help (see more with \'--help\')'
complete -c arl-inspect -n "__fish_arl_inspect_needs_command" -s V -l version -d 'Print version'
complete -c arl-inspect -n "__fish_arl_inspect_needs_command" -f -a "stats" -d 'Per-stage statistics: counts, statuses, rewards, lengths, tokens, groups'
complete -c arl-inspect -n "__fish_arl_inspect_needs_command" -f -a "eval" -d 'Benchmark scores as papers report them: accuracy or pass@k, with intervals'
complete -c arl-inspect -n "__fish_arl_inspect_needs_command" -f -a "show" -d 'One record for a human: prompt, turns, tool calls, trained spans, reward'
complete -c arl-inspect -n "__fish_arl_inspect_needs_command" -f -a "convert" -d 'Convert between JSONL and Parquet (lossless, unknown fields included)'
complete -c arl-inspect -n "__fish_arl_inspect_needs_command" -f -a "trace" -d 'Where a rollout\'s wall time went: a timeline (HTML) and a summary'
complete -c arl-inspect -n "__fish_arl_inspect_needs_command" -f -a "help" -d 'Print this message or the help of the given subcommand(s)'
complete -c arl-inspect -n "__fish_arl_inspect_using_subcommand stats" -s i -l input -d 'Input file (JSONL or Parquet, detected from content); repeat for several; `-` or none reads stdin' -r -F
complete -c arl-inspect -n "__fish_arl_inspect_using_subcommand stats" -l on-error -d 'What to do with a bad record: `fail` stops (exit 65, no output file), `skip` keeps going and writes it to `--rejects`' -r -f -a "fail\t'Stop with an error naming the record; write no output file'
skip\t'Keep going; put every bad record in the `--rejects` file'"
complete -c arl-inspect -n "__fish_arl_inspect_using_subcommand stats" -l rejects -d 'File that receives every bad record (the original line verbatim for JSONL, the row as JSON for Parquet) when `--on-error skip`' -r -F
complete -c arl-inspect -n "__fish_arl_inspect_using_subcommand stats" -l pass-threshold -d 'Score at or above which a sample counts as solved for pass@k' -r
complete -c arl-inspect -n "__fish_arl_inspect_using_subcommand stats" -l by -d 'Also break the statistics down by this field: a record field (`finish_reason`, `status`) or a path into `metadata` (`metadata.kind`, `metadata.difficulty`); repeatable' -r
complete -c arl-inspect -n "__fish_arl_inspect_using_subcommand stats" -s q -l quiet -d 'No progress bar and no summary on stderr'
complete -c arl-inspect -n "__fish_arl_inspect_using_subcommand stats" -l json -d 'Print JSON instead of a table'
complete -c arl-inspect -n "__fish_arl_inspect_using_subcommand stats" -s h -l help -d 'Print help (see more with \'--help\')'
complete -c arl-inspect -n "__fish_arl_inspect_using_subcommand eval" -s i -l input -d 'Input file (JSONL or Parquet, detected from content); repeat for several; `-` or none reads stdin' -r -F
complete -c arl-inspect -n "__fish_arl_inspect_using_subcommand eval" -l on-error -d 'What to do with a bad record: `fail` stops (exit 65, no output file), `skip` keeps going and writes it to `--rejects`' -r -f -a "fail\t'Stop with an error naming the record; write no output file'
skip\t'Keep going; put every bad record in the `--rejects` file'"
complete -c arl-inspect -n "__fish_arl_inspect_using_subcommand eval" -l rejects -d 'File that receives every bad record (the original line verbatim for JSONL, the row as JSON for Parquet) when `--on-error skip`' -r -F
complete -c arl-inspect -n "__fish_arl_inspect_using_subcommand eval" -l by -d 'Also report each value of this field (`metadata.level`, `metadata.type`); repeatable' -r
complete -c arl-inspect -n "__fish_arl_inspect_using_subcommand eval" -l k -d 'pass@k for these k (comma-separated); default 1 and the samples per problem' -r
complete -c arl-inspect -n "__fish_arl_inspect_using_subcommand eval" -l pass-threshold -d 'Score at or above which a sample counts as solved' -r
complete -c arl-inspect -n "__fish_arl_inspect_using_subcommand eval" -l bootstrap -d 'Bootstrap resamples for pass@k\'s interval' -r
complete -c arl-inspect -n "__fish_arl_inspect_using_subcommand eval" -l seed -d 'Seed of the bootstrap' -r
complete -c arl-inspect -n "__fish_arl_inspect_using_subcommand eval" -s q -l quiet -d 'No progress bar and no summary on stderr'
complete -c arl-inspect -n "__fish_arl_inspect_using_subcommand eval" -l json -d 'Print JSON instead of a table'
complete -c arl-inspect -n "__fish_arl_inspect_using_subcommand eval" -s h -l help -d 'Print help (see more with \'--help\')'
complete -c arl-inspect -n "__fish_arl_inspect_using_subcommand show" -s i -l input -d 'Input file (JSONL or Parquet, detected from content); repeat for several; `-` or none reads stdin' -r -F
complete -c arl-inspect -n "__fish_arl_inspect_using_subcommand show" -l on-error -d 'What to do with a bad record: `fail` stops (exit 65, no output file), `skip` keeps going and writes it to `--rejects`' -r -f -a "fail\t'Stop with an error naming the record; write no output file'
skip\t'Keep going; put every bad record in the `--rejects` file'"
complete -c arl-inspect -n "__fish_arl_inspect_using_subcommand show" -l rejects -d 'File that receives every bad record (the original line verbatim for JSONL, the row as JSON for Parquet) when `--on-error skip`' -r -F
complete -c arl-inspect -n "__fish_arl_inspect_using_subcommand show" -s n -l index -d 'Which record, counted from 0 over the input' -r
complete -c arl-inspect -n "__fish_arl_inspect_using_subcommand show" -l prompt-id -d 'Select by `prompt_id` instead (with `--sample`)' -r
complete -c arl-inspect -n "__fish_arl_inspect_using_subcommand show" -l sample -d 'With `--prompt-id`: the `sample_index` to show' -r
complete -c arl-inspect -n "__fish_arl_inspect_using_subcommand show" -l tokenizer -d 'Model or tokenizer directory: decode tokens and mark each trained token' -r -F
complete -c arl-inspect -n "__fish_arl_inspect_using_subcommand show" -l color -d 'Colour: `auto` (when stdout is a terminal and NO_COLOR is unset), `always`, `never`' -r -f -a "auto\t''
always\t''
never\t''"
complete -c arl-inspect -n "__fish_arl_inspect_using_subcommand show" -s q -l quiet -d 'No progress bar and no summary on stderr'
complete -c arl-inspect -n "__fish_arl_inspect_using_subcommand show" -l tokens -d 'List every response token (needs `--tokenizer`)'
complete -c arl-inspect -n "__fish_arl_inspect_using_subcommand show" -l json -d 'Print the record as pretty JSON instead'
complete -c arl-inspect -n "__fish_arl_inspect_using_subcommand show" -s h -l help -d 'Print help (see more with \'--help\')'
complete -c arl-inspect -n "__fish_arl_inspect_using_subcommand convert" -s i -l input -d 'Input file (JSONL or Parquet, detected from content); repeat for several; `-` or none reads stdin' -r -F
complete -c arl-inspect -n "__fish_arl_inspect_using_subcommand convert" -l on-error -d 'What to do with a bad record: `fail` stops (exit 65, no output file), `skip` keeps going and writes it to `--rejects`' -r -f -a "fail\t'Stop with an error naming the record; write no output file'
skip\t'Keep going; put every bad record in the `--rejects` file'"
complete -c arl-inspect -n "__fish_arl_inspect_using_subcommand convert" -l rejects -d 'File that receives every bad record (the original line verbatim for JSONL, the row as JSON for Parquet) when `--on-error skip`' -r -F
complete -c arl-inspect -n "__fish_arl_inspect_using_subcommand convert" -s o -l output -d 'Output file, written atomically (temporary name, renamed when complete); none or `-` writes stdout' -r -F
complete -c arl-inspect -n "__fish_arl_inspect_using_subcommand convert" -l format -d 'Output format; default: from the output\'s extension (`.parquet` → Parquet), JSONL otherwise and on stdout' -r -f -a "jsonl\t''
parquet\t''"
complete -c arl-inspect -n "__fish_arl_inspect_using_subcommand convert" -s q -l quiet -d 'No progress bar and no summary on stderr'
complete -c arl-inspect -n "__fish_arl_inspect_using_subcommand convert" -s h -l help -d 'Print help (see more with \'--help\')'
complete -c arl-inspect -n "__fish_arl_inspect_using_subcommand trace" -s o -l output -d 'Write the timeline as a self-contained HTML page, atomically' -r -F
complete -c arl-inspect -n "__fish_arl_inspect_using_subcommand trace" -l top -d 'How many of the slowest samples to list' -r
complete -c arl-inspect -n "__fish_arl_inspect_using_subcommand trace" -l json -d 'Print the summary as JSON instead (the critical path\'s segments under `critical_path.phases`, in seconds)'
complete -c arl-inspect -n "__fish_arl_inspect_using_subcommand trace" -s q -l quiet -d 'No summary on stdout and no note on stderr (with `-o`: only the page)'
complete -c arl-inspect -n "__fish_arl_inspect_using_subcommand trace" -s h -l help -d 'Print help (see more with \'--help\')'
complete -c arl-inspect -n "__fish_arl_inspect_using_subcommand help; and not __fish_seen_subcommand_from stats eval show convert trace help" -f -a "stats" -d 'Per-stage statistics: counts, statuses, rewards, lengths, tokens, groups'
complete -c arl-inspect -n "__fish_arl_inspect_using_subcommand help; and not __fish_seen_subcommand_from stats eval show convert trace help" -f -a "eval" -d 'Benchmark scores as papers report them: accuracy or pass@k, with intervals'
complete -c arl-inspect -n "__fish_arl_inspect_using_subcommand help; and not __fish_seen_subcommand_from stats eval show convert trace help" -f -a "show" -d 'One record for a human: prompt, turns, tool calls, trained spans, reward'
complete -c arl-inspect -n "__fish_arl_inspect_using_subcommand help; and not __fish_seen_subcommand_from stats eval show convert trace help" -f -a "convert" -d 'Convert between JSONL and Parquet (lossless, unknown fields included)'
complete -c arl-inspect -n "__fish_arl_inspect_using_subcommand help; and not __fish_seen_subcommand_from stats eval show convert trace help" -f -a "trace" -d 'Where a rollout\'s wall time went: a timeline (HTML) and a summary'
complete -c arl-inspect -n "__fish_arl_inspect_using_subcommand help; and not __fish_seen_subcommand_from stats eval show convert trace help" -f -a "help" -d 'Print this message or the help of the given subcommand(s)'
