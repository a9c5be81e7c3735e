//! Shared by the reader targets (included with `#[path]`).

/// `RecordReader` turns a panic inside the Parquet decoder into an error
/// (`catch_unwind`), as the tools see it; libFuzzer's hook would abort on it
/// before it is caught. Panics that escape still abort (libfuzzer-sys), and
/// this hook prints where they came from.
pub fn quiet_panics() {
    static ONCE: std::sync::Once = std::sync::Once::new();
    ONCE.call_once(|| {
        std::panic::set_hook(Box::new(|info| eprintln!("panic: {info}")));
    });
}
