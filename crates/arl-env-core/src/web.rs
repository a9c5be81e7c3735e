//! What the web environment (`arl_env::web`) shares with the tools that
//! read its episodes: the browser tools' names, and HTML text escaping (its
//! task site's pages, `arl-inspect trace`'s timeline).

/// The names of the browser tools.
pub const TOOLS: &[&str] = &["open", "click", "type", "select", "scroll", "back"];

/// XML/HTML text escaping: `&`, `<`, `>`, `"` and `'`.
pub fn esc(s: &str) -> String {
    let mut o = String::with_capacity(s.len());
    for c in s.chars() {
        match c {
            '&' => o.push_str("&amp;"),
            '<' => o.push_str("&lt;"),
            '>' => o.push_str("&gt;"),
            '"' => o.push_str("&quot;"),
            '\'' => o.push_str("&#39;"),
            c => o.push(c),
        }
    }
    o
}
