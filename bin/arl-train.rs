//! `arl-train`: RL and SFT training of Hugging Face decoders on libtorch.
//! See `arl::cmd::train`.
fn main() -> std::process::ExitCode {
    arl::cli::bounded_omp_spin_by_default();
    arl::cli::main(arl::cmd::train::TOOL, arl::cmd::train::run)
}
