//! One module per binary: its `Args` (clap derive; doc comments are the help
//! text and the man page) and its `run`. The binaries in `bin/` only call these.
pub mod inspect;
pub mod advantage;
pub mod env;
pub mod filter;
pub mod rollout;
pub mod reward;
pub mod tasks;
pub mod serve;
pub mod sync;
pub mod train;

/// Every binary's command definition, for man pages and completions.
pub fn all() -> Vec<clap::Command> {
    use clap::CommandFactory;
    vec![
        inspect::Args::command(),
        advantage::Args::command(),
        filter::Args::command(),
        reward::Args::command(),
        tasks::Args::command(),
        train::Args::command(),
        serve::Args::command(),
        sync::Args::command(),
        rollout::Args::command(),
        env::Args::command(),
    ]
}
