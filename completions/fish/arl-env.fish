complete -c arl-env -l host -d 'Address to bind (loopback by default)' -r
complete -c arl-env -l port -d 'Port; 0 picks a free one' -r
complete -c arl-env -l max-body-bytes -d 'Largest request body, bytes (413 beyond)' -r
complete -c arl-env -l read-timeout -d 'Seconds a client gets to send a request\'s headers, then its body; a connection that stalls longer is closed (a stalled body gets 408)' -r
complete -c arl-env -l max-episodes -d 'Most episodes kept; starting one more forgets the oldest' -r
complete -c arl-env -s h -l help -d 'Print help (see more with \'--help\')'
complete -c arl-env -s V -l version -d 'Print version'
