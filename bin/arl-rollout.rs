//! `arl-rollout`: multi-turn agent rollouts against SGLang-compatible servers.
//! See `arl::cmd::rollout`.
fn main() -> std::process::ExitCode {
    arl::cli::main(arl::cmd::rollout::TOOL, arl::cmd::rollout::run)
}
