//! `arl-docs`: regenerates `man/` and `completions/` from the clap definitions
//! (`arl-docs write [ROOT]`), or checks they are current (`arl-docs check [ROOT]`).
use std::path::PathBuf;
use std::process::ExitCode;

fn main() -> ExitCode {
    let mut args = std::env::args().skip(1);
    let mode = args.next().unwrap_or_else(|| "write".into());
    let root = PathBuf::from(args.next().unwrap_or_else(|| env!("CARGO_MANIFEST_DIR").into()));
    match mode.as_str() {
        "write" => match arl::docs::write(&root) {
            Ok(n) => {
                eprintln!("arl-docs: {n} files updated");
                ExitCode::SUCCESS
            }
            Err(e) => {
                arl::cli::report("arl-docs", &e);
                ExitCode::from(1)
            }
        },
        "check" => match arl::docs::stale(&root) {
            Ok(bad) if bad.is_empty() => ExitCode::SUCCESS,
            Ok(bad) => {
                eprintln!("arl-docs: stale or missing (run `make docs`): {}", bad.join(", "));
                ExitCode::from(1)
            }
            Err(e) => {
                arl::cli::report("arl-docs", &e);
                ExitCode::from(1)
            }
        },
        _ => {
            eprintln!("usage: arl-docs write|check [ROOT]");
            ExitCode::from(2)
        }
    }
}
