//! One module per binary: its `Args` (clap derive; doc comments are the help
//! text and the man page) and its `run`. The binaries in `bin/` only call these.
pub mod inspect;
pub mod rollout;
pub mod reward;
pub mod tasks;

/// Every binary's command definition, for man pages and completions.
pub fn all() -> Vec<clap::Command> {
    use clap::CommandFactory;
    vec![inspect::Args::command(), reward::Args::command(), tasks::Args::command(), rollout::Args::command()]
}
