//! The README and the book (`docs/**/*.md`) stay true to the tree: every
//! relative link points at a file that exists (and, with `#anchor`, at a
//! heading of it, with the id mdBook and GitHub give it); every `docs/…`,
//! `scripts/…` and `experiments/…` path they name exists; every `make X`
//! they show in code is a Makefile target; the README's first two commands
//! are `make demo` and `make test`. Plain Rust: no mdBook needed.
use arl_testkit::common::root;
use std::collections::{BTreeSet, HashMap};
use std::path::{Component, Path, PathBuf};

/// The Markdown files that are checked, relative to the repository root.
fn pages(root: &Path) -> Vec<PathBuf> {
    let mut out = vec![PathBuf::from("README.md"), PathBuf::from("crates/README.md")];
    let mut stack = vec![root.join("docs")];
    while let Some(d) = stack.pop() {
        for e in std::fs::read_dir(&d).unwrap_or_else(|e| panic!("{}: {e}", d.display())) {
            let p = e.unwrap().path();
            if p.is_dir() {
                stack.push(p);
            } else if p.extension().is_some_and(|x| x == "md") {
                out.push(p.strip_prefix(root).unwrap().to_path_buf());
            }
        }
    }
    out.sort();
    out
}

/// A page split into prose (code spans and blocks blanked) and code (the
/// text of code spans and fenced blocks), line by line.
struct Page {
    prose: Vec<String>,
    /// The code spans of each line (a fenced block's line is one span).
    code: Vec<Vec<String>>,
    headings: Vec<String>,
}

fn parse(text: &str) -> Page {
    let mut page = Page { prose: Vec::new(), code: Vec::new(), headings: Vec::new() };
    let mut fenced = false;
    for line in text.lines() {
        if line.trim_start().starts_with("```") {
            fenced = !fenced;
            page.prose.push(String::new());
            page.code.push(Vec::new());
            continue;
        }
        if fenced {
            page.prose.push(String::new());
            page.code.push(vec![line.to_string()]);
            continue;
        }
        if line.starts_with('#') {
            page.headings.push(line.trim_start_matches('#').trim().to_string());
        }
        // Inline code spans (runs of backticks of equal length).
        let (mut prose, mut code) = (String::new(), Vec::new());
        let b = line.as_bytes();
        let mut i = 0;
        while i < b.len() {
            if b[i] == b'`' {
                let n = b[i..].iter().take_while(|&&c| c == b'`').count();
                let fence = &line[i..i + n];
                if let Some(end) = line[i + n..].find(fence) {
                    code.push(line[i + n..i + n + end].to_string());
                    prose.push(' ');
                    i += n + end + n;
                    continue;
                }
            }
            let ch = line[i..].chars().next().unwrap();
            prose.push(ch);
            i += ch.len_utf8();
        }
        page.prose.push(prose);
        page.code.push(code);
    }
    page
}

/// The id mdBook (and GitHub) gives a heading: the rendered text lowercased,
/// whitespace to `-`, everything but letters, digits, `_` and `-` dropped.
fn heading_id(heading: &str) -> String {
    // Links render as their text; emphasis and code marks disappear.
    let mut text = String::new();
    let mut rest = heading;
    while let Some(open) = rest.find('[') {
        text.push_str(&rest[..open]);
        match rest[open..].find("](").and_then(|m| rest[open + m..].find(')').map(|c| (m, c))) {
            Some((m, c)) => {
                text.push_str(&rest[open + 1..open + m]);
                rest = &rest[open + m + c + 1..];
            }
            None => {
                text.push('[');
                rest = &rest[open + 1..];
            }
        }
    }
    text.push_str(rest);
    text.chars()
        .filter_map(|c| match c {
            '*' | '`' => None,
            c if c.is_alphanumeric() || c == '_' || c == '-' => Some(c.to_lowercase().next().unwrap_or(c)),
            c if c.is_whitespace() => Some('-'),
            _ => None,
        })
        .collect()
}

fn anchors(page: &Page) -> BTreeSet<String> {
    let mut seen: HashMap<String, usize> = HashMap::new();
    let mut out = BTreeSet::new();
    for h in &page.headings {
        let id = heading_id(h);
        let n = seen.entry(id.clone()).or_insert(0);
        out.insert(if *n == 0 { id.clone() } else { format!("{id}-{n}") });
        *n += 1;
    }
    out
}

/// `[text](target)` and `![alt](target)` in prose.
fn links(line: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut rest = line;
    while let Some(i) = rest.find("](") {
        let after = &rest[i + 2..];
        match after.find(')') {
            Some(end) => {
                out.push(after[..end].trim().to_string());
                rest = &after[end..];
            }
            None => break,
        }
    }
    out
}

/// Paths under `docs/`, `scripts/` and `experiments/` named anywhere (prose or
/// code), at the start of a word: not `foo/scripts/x`.
fn named_paths(line: &str) -> Vec<String> {
    let mut out = Vec::new();
    for prefix in ["docs/", "scripts/", "experiments/"] {
        let mut from = 0;
        while let Some(k) = line[from..].find(prefix) {
            let at = from + k;
            from = at + prefix.len();
            let before = line[..at].chars().next_back();
            if before.is_some_and(|c| c.is_alphanumeric() || matches!(c, '/' | '.' | '_' | '-' | '~' | '$')) {
                continue;
            }
            let end = line[at..]
                .find(|c: char| !(c.is_alphanumeric() || matches!(c, '/' | '.' | '_' | '-')))
                .map_or(line.len(), |e| at + e);
            let p = line[at..end].trim_end_matches(['.', ',', ':', ';']);
            // Placeholders (`experiments/X.env`, `runs/NAME/…`) and globs name no file.
            let next = line[end..].chars().next();
            if next.is_some_and(|c| matches!(c, '<' | '*' | '…' | '{' | '$')) {
                continue;
            }
            let placeholder = Path::new(p).components().any(|c| {
                let s = c.as_os_str().to_string_lossy();
                let stem = s.split('.').next().unwrap_or("");
                matches!(stem, "X" | "NAME" | "N" | "FILE" | "DIR" | "TARGET")
            });
            if !placeholder {
                out.push(p.to_string());
            }
        }
    }
    out
}

/// `make TARGET` in code, and the Makefile's targets.
fn make_targets_used(code: &str) -> Vec<String> {
    let mut out = Vec::new();
    let words: Vec<&str> = code.split_whitespace().collect();
    for w in words.windows(2) {
        if w[0] == "make" {
            let t = w[1].trim_end_matches([',', ';', ')', '`']);
            if !t.is_empty() && t.chars().all(|c| c.is_ascii_lowercase() || c == '-') {
                out.push(t.to_string());
            }
        }
    }
    out
}

fn makefile_targets(root: &Path) -> BTreeSet<String> {
    let text = std::fs::read_to_string(root.join("Makefile")).unwrap();
    let mut out = BTreeSet::new();
    for line in text.lines() {
        if line.starts_with(['\t', '#', ' ', '.']) || line.contains(":=") || line.contains("?=") {
            continue;
        }
        if let Some((names, _)) = line.split_once(':') {
            out.extend(names.split_whitespace().map(str::to_string));
        }
    }
    out
}

/// `a/b/../c` → `a/c`, without touching the filesystem.
fn normalize(p: &Path) -> PathBuf {
    let mut out = PathBuf::new();
    for c in p.components() {
        match c {
            Component::ParentDir => {
                out.pop();
            }
            Component::CurDir => {}
            c => out.push(c),
        }
    }
    out
}

#[test]
fn readme_and_book_links_paths_and_commands_exist() {
    let root = root();
    let targets = makefile_targets(root);
    let files = pages(root);
    let parsed: HashMap<PathBuf, Page> =
        files.iter().map(|f| (f.clone(), parse(&std::fs::read_to_string(root.join(f)).unwrap()))).collect();
    let mut broken = Vec::new();
    let mut checked = 0;
    for f in &files {
        let page = &parsed[f];
        let dir = f.parent().unwrap_or(Path::new(""));
        for (n, (prose, code)) in page.prose.iter().zip(&page.code).enumerate() {
            let at = format!("{}:{}", f.display(), n + 1);
            for target in links(prose) {
                if target.contains("://") || target.starts_with("mailto:") {
                    continue;
                }
                checked += 1;
                let (path, anchor) = match target.split_once('#') {
                    Some((p, a)) => (p, Some(a)),
                    None => (target.as_str(), None),
                };
                let file = if path.is_empty() { f.clone() } else { normalize(&dir.join(path)) };
                if !root.join(&file).exists() {
                    broken.push(format!("{at}: link `{target}`: no file `{}`", file.display()));
                    continue;
                }
                if let Some(a) = anchor {
                    let Some(other) = parsed.get(&file) else {
                        broken.push(format!("{at}: link `{target}`: an anchor into a page that is not checked"));
                        continue;
                    };
                    if !anchors(other).contains(a) {
                        broken
                            .push(format!("{at}: link `{target}`: `{}` has no heading with id `{a}`", file.display()));
                    }
                }
            }
            // docs/reference/ quotes other repositories' paths.
            let quoted = f.starts_with("docs/reference");
            for p in named_paths(prose).into_iter().chain(code.iter().flat_map(|c| named_paths(c))) {
                if quoted {
                    continue;
                }
                checked += 1;
                if !root.join(&p).exists() {
                    broken.push(format!("{at}: names `{p}`, which does not exist"));
                }
            }
            for t in code.iter().flat_map(|c| make_targets_used(c)) {
                checked += 1;
                if !targets.contains(&t) {
                    broken.push(format!("{at}: `make {t}` is not a Makefile target"));
                }
            }
        }
    }
    assert!(checked > 100, "only {checked} links, paths and commands found: is the parser reading the pages?");
    assert!(broken.is_empty(), "{} broken:\n{}", broken.len(), broken.join("\n"));
}

#[test]
fn readme_first_two_commands_are_the_demo_and_the_tests() {
    let readme = std::fs::read_to_string(root().join("README.md")).unwrap();
    let page = parse(&readme);
    let first_block: Vec<&str> = readme
        .lines()
        .skip_while(|l| !l.trim_start().starts_with("```"))
        .skip(1)
        .take_while(|l| !l.trim_start().starts_with("```"))
        .filter(|l| !l.trim().is_empty())
        .collect();
    let commands: Vec<&str> = first_block.iter().map(|l| l.split('#').next().unwrap().trim()).collect();
    assert_eq!(
        commands.get(..2),
        Some(&["make demo", "make test"][..]),
        "the README's first code block: {first_block:?}"
    );
    let targets = makefile_targets(root());
    assert!(targets.contains("demo") && targets.contains("test"), "Makefile targets: {targets:?}");
    // The pipe that says what arl is comes early.
    let pipe = readme.lines().position(|l| l.contains("arl-rollout") && l.contains("--endpoint"));
    assert!(pipe.is_some_and(|n| n < 60), "the pipe is at line {pipe:?} of the README, not within its first 60");
    assert!(page.prose.len() <= 250, "the README has {} lines (at most 250)", page.prose.len());
}

#[test]
fn heading_ids_follow_mdbook() {
    assert_eq!(heading_id("Tokens/s against transformers (`serve.sh`)"), "tokenss-against-transformers-servesh");
    assert_eq!(heading_id("12. Real models, real scale"), "12-real-models-real-scale");
    assert_eq!(
        heading_id("The cost of `--trace` (`rollout-trace-cost.sh`)"),
        "the-cost-of---trace-rollout-trace-costsh"
    );
    assert_eq!(heading_id("See [the record](data.md) **now**"), "see-the-record-now");
    let page = parse("# A\n## A\n```\n# not a heading\n```\n");
    assert_eq!(anchors(&page), BTreeSet::from(["a".to_string(), "a-1".to_string()]));
    assert_eq!(named_paths("run `scripts/run.sh` and experiments/X.env, not foo/scripts/x."), ["scripts/run.sh"]);
    assert_eq!(links("see [a](b.md#c) and ![d](e.svg)"), ["b.md#c", "e.svg"]);
}
