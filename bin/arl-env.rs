//! `arl-env`: environment services (the shop API). See `arl::cmd::env`.
fn main() -> std::process::ExitCode {
    arl::cli::main(arl::cmd::env::TOOL, arl::cmd::env::run)
}
