//! `arl-inspect`: statistics, a readable view of one record, JSONL ↔ Parquet.
//! See `arl::cmd::inspect`.
fn main() -> std::process::ExitCode {
    arl::cli::main(arl::cmd::inspect::TOOL, arl::cmd::inspect::run)
}
