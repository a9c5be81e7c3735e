//! The errors every tool distinguishes, by the exit code they map to
//! (docs/DESIGN.md §11): usage errors (2), bad input data (65), and an error with a
//! hint line. Everything else is a runtime failure (1).
/// A usage error (exit 2): a flag combination that cannot work.
#[derive(Debug)]
pub struct UsageError(pub String);
impl std::fmt::Display for UsageError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}
impl std::error::Error for UsageError {}

/// Bad input data (exit 65), e.g. a malformed record.
#[derive(Debug)]
pub struct DataError(pub String);
impl std::fmt::Display for DataError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}
impl std::error::Error for DataError {}

/// An error with a hint line printed after it.
#[derive(Debug)]
pub struct Hinted {
    pub error: anyhow::Error,
    pub hint: String,
}
impl std::fmt::Display for Hinted {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}", self.error)
    }
}
impl std::error::Error for Hinted {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        self.error.source()
    }
}

pub fn usage(msg: impl Into<String>) -> anyhow::Error {
    UsageError(msg.into()).into()
}

pub fn data(msg: impl Into<String>) -> anyhow::Error {
    DataError(msg.into()).into()
}

pub fn hint(error: anyhow::Error, hint: impl Into<String>) -> anyhow::Error {
    Hinted { error, hint: hint.into() }.into()
}
