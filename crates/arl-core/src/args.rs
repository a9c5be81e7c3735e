//! The flags every tool shares, defined once so they read the same in every
//! `--help` (STYLE.md, "A binary"): `-i`, `--on-error`, `--rejects`, `-q`,
//! `-o`, `--format`, and the dataset's column mapping. Only the command-line
//! layer of a binary uses these: each turns into the plain, checked
//! specification the library works from ([`InputSpec`], [`OutputSpec`],
//! [`PromptKeys`]).
use crate::cli::{hint, usage, InputSpec, OnError, OutputSpec};
use crate::dataset::PromptKeys;
use crate::io::Format;
use anyhow::Result;
use clap::Args;
use std::path::{Path, PathBuf};

/// Input flags shared by every tool that reads records.
#[derive(Debug, Clone, Args)]
#[command(next_help_heading = "Common options")]
pub struct InputArgs {
    /// Input file (JSONL or Parquet, detected from content); repeat for several;
    /// `-` or none reads stdin
    #[arg(short = 'i', long = "input", value_name = "PATH")]
    pub input: Vec<PathBuf>,

    /// What to do with a bad record: `fail` stops (exit 65, no output file),
    /// `skip` keeps going and writes it to `--rejects`
    #[arg(long, value_enum, default_value_t = OnError::Fail, value_name = "POLICY")]
    pub on_error: OnError,

    /// File that receives every bad record (the original line verbatim for JSONL,
    /// the row as JSON for Parquet) when `--on-error skip`
    #[arg(long, value_name = "PATH")]
    pub rejects: Option<PathBuf>,

    /// No progress bar and no summary on stderr
    #[arg(short = 'q', long)]
    pub quiet: bool,
}

/// Output flags shared by every tool that writes records.
#[derive(Debug, Clone, Args)]
#[command(next_help_heading = "Common options")]
pub struct OutputArgs {
    /// Output file, written atomically (temporary name, renamed when complete);
    /// none or `-` writes stdout
    #[arg(short = 'o', long = "output", value_name = "PATH")]
    pub output: Option<PathBuf>,

    /// Output format; default: from the output's extension (`.parquet` → Parquet),
    /// JSONL otherwise and on stdout
    #[arg(long, value_enum, value_name = "FORMAT")]
    pub format: Option<Format>,
}

impl OutputArgs {
    /// The output format: `--format`, else from the output's extension
    /// (`.parquet` → Parquet), JSONL otherwise and on stdout.
    pub fn format(&self) -> Format {
        match (&self.format, &self.output) {
            (Some(f), _) => *f,
            (None, Some(p)) if p != Path::new("-") => Format::from_path(p),
            _ => Format::Jsonl,
        }
    }

    /// The resolved destination (`-` is stdout).
    pub fn spec(&self) -> OutputSpec {
        let path = self.output.clone().filter(|p| p != Path::new("-"));
        OutputSpec { path, format: self.format() }
    }
}

impl InputArgs {
    /// The input with its bad-record policy, checked: `--on-error skip` needs
    /// `--rejects`, and `--rejects` is only for `skip`.
    pub fn spec(&self) -> Result<InputSpec> {
        if self.on_error == OnError::Skip && self.rejects.is_none() {
            return Err(hint(
                usage("`--on-error skip` needs `--rejects FILE`, so that no bad record is lost"),
                "add `--rejects rejects.jsonl`",
            ));
        }
        if self.rejects.is_some() && self.on_error != OnError::Skip {
            return Err(usage("`--rejects` is only used with `--on-error skip`"));
        }
        let paths = if self.input.is_empty() { vec![PathBuf::from("-")] } else { self.input.clone() };
        Ok(InputSpec { paths, on_error: self.on_error, rejects: self.rejects.clone(), quiet: self.quiet })
    }
}

/// Column mapping for prompt datasets.
#[derive(Debug, Clone, Default, Args)]
#[command(next_help_heading = "Dataset options")]
pub struct DatasetArgs {
    /// Column holding the prompt (text or chat messages); dots reach into objects
    #[arg(long, value_name = "KEY")]
    pub prompt_key: Option<String>,
    /// Column holding the ground truth; default: `label`, else `reward_model.ground_truth`
    #[arg(long, value_name = "KEY")]
    pub label_key: Option<String>,
}

impl DatasetArgs {
    pub fn keys(&self) -> PromptKeys {
        PromptKeys { prompt_key: self.prompt_key.clone(), label_key: self.label_key.clone() }
    }
}
