//! `arl-tasks`: procedurally generated, verifiable tasks. See `arl::cmd::tasks`.
fn main() -> std::process::ExitCode {
    arl::cli::main(arl::cmd::tasks::TOOL, arl::cmd::tasks::run)
}
