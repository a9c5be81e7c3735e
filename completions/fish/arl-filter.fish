complete -c arl-filter -l zero-std-eps -d 'The std at or below which `--drop-zero-std` counts a group as constant' -r
complete -c arl-filter -l group-size -d 'Expected group size: a group that does not keep all N records after the per-record filters (or that has fewer than N in the input) is dropped whole, so the output has only full groups. Also lets groups stream' -r
complete -c arl-filter -l keep-groups -d 'Keep only the first N groups that pass every other filter (over-sampling: roll out more prompts than needed, keep a batch of N); later groups are dropped as over_keep_groups' -r
complete -c arl-filter -l drop-status -d 'Drop records with one of these statuses, comma-separated (completed, truncated, aborted, failed)' -r
complete -c arl-filter -l min-response-len -d 'Drop records whose response (len(tokens) − prompt_len, else len(loss_mask)) is shorter than N tokens' -r
complete -c arl-filter -l max-response-len -d 'Drop records whose response is longer than N tokens' -r
complete -c arl-filter -l current-version -d 'The trainer\'s current weight version (a training step number)' -r
complete -c arl-filter -l max-staleness -d 'Drop records generated more than K versions ago: V − (oldest of `weight_versions`, as integers) > K' -r
complete -c arl-filter -l stats-json -d 'Also write the summary as JSON to FILE (written atomically)' -r -F
complete -c arl-filter -s i -l input -d 'Input file (JSONL or Parquet, detected from content); repeat for several; `-` or none reads stdin' -r -F
complete -c arl-filter -l on-error -d 'What to do with a bad record: `fail` stops (exit 65, no output file), `skip` keeps going and writes it to `--rejects`' -r -f -a "fail\t'Stop with an error naming the record; write no output file'
skip\t'Keep going; put every bad record in the `--rejects` file'"
complete -c arl-filter -l rejects -d 'File that receives every bad record (the original line verbatim for JSONL, the row as JSON for Parquet) when `--on-error skip`' -r -F
complete -c arl-filter -s o -l output -d 'Output file, written atomically (temporary name, renamed when complete); none or `-` writes stdout' -r -F
complete -c arl-filter -l format -d 'Output format; default: from the output\'s extension (`.parquet` → Parquet), JSONL otherwise and on stdout' -r -f -a "jsonl\t''
parquet\t''"
complete -c arl-filter -l drop-zero-std -d 'Drop groups whose rewards do not vary: population std of the group\'s surviving rewards ≤ `--zero-std-eps` (DAPO dynamic sampling; a group of one has no spread and is dropped)'
complete -c arl-filter -s q -l quiet -d 'No progress bar and no summary on stderr'
complete -c arl-filter -s h -l help -d 'Print help (see more with \'--help\')'
complete -c arl-filter -s V -l version -d 'Print version'
