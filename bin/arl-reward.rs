//! `arl-reward`: adds `reward` and `reward_detail` to trajectories. See `arl::cmd::reward`.
fn main() -> std::process::ExitCode {
    arl::cli::main(arl::cmd::reward::TOOL, arl::cmd::reward::run)
}
