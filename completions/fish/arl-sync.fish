complete -c arl-sync -l checkpoint -d 'Checkpoint directory to load (Hugging Face layout, as `arl-train --save` writes it; with `--lora`, the adapter\'s directory)' -r -F
complete -c arl-sync -l lora -d 'Push `--checkpoint` as the LoRA adapter NAME (`/load_lora_adapter`) instead of as full weights; requests pick it with `lora_path: NAME` (`arl-rollout --lora NAME`)' -r
complete -c arl-sync -l weight-version -d 'Version string the servers report afterwards (arl uses the training step)' -r
complete -c arl-sync -l server-path -d 'Path the servers load, when it differs from `--checkpoint` on their machine; default: the absolute path of `--checkpoint`' -r
complete -c arl-sync -l endpoint -d 'Server URL (`http://127.0.0.1:30000`; the scheme may be left out); repeat for several' -r
complete -c arl-sync -l router -d 'sgl-router URL: update every worker it lists (added to `--endpoint`s)' -r
complete -c arl-sync -l api-key -d 'Bearer token sent to servers and router (their `--api-key`)' -r
complete -c arl-sync -l timeout -d 'Seconds allowed for one server\'s weight update' -r
complete -c arl-sync -l verify-timeout -d 'Seconds allowed for connecting, router discovery and each verification call' -r
complete -c arl-sync -l abort-running -d 'Abort the requests running on each server instead of waiting for them (`abort_all_requests`; they finish with `finish_reason` `abort`). Not with `--lora`: an adapter is replaced without waiting'
complete -c arl-sync -l json -d 'Print a JSON summary instead of one line per server'
complete -c arl-sync -s h -l help -d 'Print help (see more with \'--help\')'
complete -c arl-sync -s V -l version -d 'Print version'
