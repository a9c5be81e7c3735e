//! Python list-of-strings literals, as some benchmark files store a list
//! (`str(list)`: `['assert f(1) == 2', "assert g('a') == 'b'"]`).
//! Only what `repr` writes for a list of `str`: single- or double-quoted
//! strings (no prefixes, no triple quotes) with backslash escapes, separated
//! by commas.

/// The strings of `s`, a Python list literal of strings; `Err` says what is
/// wrong and at which character.
pub fn string_list(s: &str) -> Result<Vec<String>, String> {
    let chars: Vec<char> = s.chars().collect();
    let mut i = skip_ws(&chars, 0);
    if chars.get(i) != Some(&'[') {
        return Err(format!("expected `[` at character {i}"));
    }
    i = skip_ws(&chars, i + 1);
    let mut out = Vec::new();
    if chars.get(i) == Some(&']') {
        return end(&chars, i, out);
    }
    loop {
        let (item, next) = string(&chars, i)?;
        out.push(item);
        i = skip_ws(&chars, next);
        match chars.get(i) {
            Some(',') => {
                i = skip_ws(&chars, i + 1);
                if chars.get(i) == Some(&']') {
                    return end(&chars, i, out);
                }
            }
            Some(']') => return end(&chars, i, out),
            _ => return Err(format!("expected `,` or `]` at character {i}")),
        }
    }
}

fn end(chars: &[char], i: usize, out: Vec<String>) -> Result<Vec<String>, String> {
    let j = skip_ws(chars, i + 1);
    if j != chars.len() {
        return Err(format!("text after the list at character {j}"));
    }
    Ok(out)
}

fn skip_ws(chars: &[char], mut i: usize) -> usize {
    while chars.get(i).is_some_and(|c| c.is_whitespace()) {
        i += 1;
    }
    i
}

/// One quoted string from `i`: its value and the index after its closing quote.
fn string(chars: &[char], i: usize) -> Result<(String, usize), String> {
    let q = match chars.get(i) {
        Some(&c @ ('\'' | '"')) => c,
        _ => return Err(format!("expected a quoted string at character {i}")),
    };
    let mut out = String::new();
    let mut j = i + 1;
    while let Some(&c) = chars.get(j) {
        match c {
            c if c == q => return Ok((out, j + 1)),
            '\\' => {
                let e = *chars.get(j + 1).ok_or_else(|| format!("unfinished escape at character {j}"))?;
                j += 2;
                match e {
                    'n' => out.push('\n'),
                    't' => out.push('\t'),
                    'r' => out.push('\r'),
                    '0' => out.push('\0'),
                    'a' => out.push('\u{7}'),
                    'b' => out.push('\u{8}'),
                    'f' => out.push('\u{c}'),
                    'v' => out.push('\u{b}'),
                    '\\' | '\'' | '"' => out.push(e),
                    '\n' => {}
                    'x' | 'u' | 'U' => {
                        let n = match e {
                            'x' => 2,
                            'u' => 4,
                            _ => 8,
                        };
                        let hex: String = chars.get(j..j + n).map(|h| h.iter().collect()).unwrap_or_default();
                        let v = u32::from_str_radix(&hex, 16)
                            .ok()
                            .and_then(char::from_u32)
                            .ok_or_else(|| format!("bad \\{e} escape at character {}", j - 2))?;
                        out.push(v);
                        j += n;
                    }
                    // Python keeps an unknown escape as written.
                    other => {
                        out.push('\\');
                        out.push(other);
                    }
                }
            }
            _ => {
                out.push(c);
                j += 1;
            }
        }
    }
    Err(format!("unterminated string starting at character {i}"))
}

#[cfg(test)]
mod tests {
    use super::string_list;

    #[test]
    fn reads_what_repr_writes() {
        let s = r#"['assert f("a") == 1', "assert g('b') == 'c'", 'x\n\\y\'z\x41\u00e9', ]"#;
        assert_eq!(string_list(s).unwrap(), ["assert f(\"a\") == 1", "assert g('b') == 'c'", "x\n\\y'zAé"]);
        assert_eq!(string_list(" [ ] ").unwrap(), Vec::<String>::new());
        assert!(string_list("['a' 'b']").unwrap_err().contains("expected `,`"));
        assert!(string_list("['a'").unwrap_err().contains("expected `,` or `]`"));
        assert!(string_list("['a").unwrap_err().contains("unterminated"));
        assert!(string_list("'a'").unwrap_err().contains("expected `[`"));
        assert!(string_list("['a'] x").unwrap_err().contains("after the list"));
    }
}
