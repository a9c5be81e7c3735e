//! The one-pass reader of a `/generate` answer in SGLang's plain shape (see
//! the parent module): a cursor over the body's bytes that reads the ids,
//! log-probs, finish reason and weight version, and gives up (`None`) on
//! anything it would have to interpret beyond the plain cases.
use super::Generation;

/// The one-pass reader: `Some` only for a well-formed answer in the plain
/// shape, read exactly as [`by_serde`](super::by_serde) reads it; `None` otherwise.
pub(super) fn fast(body: &[u8]) -> Option<Generation> {
    let mut r = Reader { s: body, at: 0 };
    let mut output_ids: Option<Vec<u32>> = None;
    let mut meta: Option<Meta> = None;
    let mut seen_ids = false;
    r.object(|r, key| {
        match key {
            b"output_ids" if !seen_ids => {
                seen_ids = true;
                output_ids = if r.null() { None } else { Some(r.ids()?) };
            }
            b"meta_info" if meta.is_none() => meta = Some(r.meta()?),
            b"output_ids" | b"meta_info" => return None, // twice: serde's error
            _ => r.skip(0, false)?,
        }
        Some(())
    })?;
    if !r.at_end() {
        return None;
    }
    let meta = meta?;
    let (logprobs, lp_ids) = meta.logprobs?;
    let output_ids = match output_ids {
        Some(ids) if ids != lp_ids => return None,
        Some(ids) => ids,
        None => lp_ids,
    };
    Some(Generation {
        output_ids,
        logprobs,
        finish: meta.finish.unwrap_or_else(|| "unknown".into()),
        weight_version: meta.weight_version,
    })
}

/// What [`fast`] read of `meta_info`.
#[derive(Default)]
struct Meta {
    logprobs: Option<(Vec<f32>, Vec<u32>)>,
    finish: Option<String>,
    weight_version: Option<String>,
}

/// Most nesting [`Reader::skip`] follows before leaving the answer to serde
/// (whose own limit is 128).
const MAX_DEPTH: usize = 64;

struct Reader<'a> {
    s: &'a [u8],
    at: usize,
}

impl<'a> Reader<'a> {
    /// The byte at the cursor; 0 at the end (a byte JSON has only inside strings).
    #[inline]
    fn byte(&self) -> u8 {
        self.s.get(self.at).copied().unwrap_or(0)
    }

    #[inline]
    fn ws(&mut self) {
        while matches!(self.byte(), b' ' | b'\t' | b'\n' | b'\r') {
            self.at += 1;
        }
    }

    /// The next byte after white space, not consumed.
    fn peek(&mut self) -> Option<u8> {
        self.ws();
        self.s.get(self.at).copied()
    }

    #[inline]
    fn eat(&mut self, c: u8) -> bool {
        self.ws();
        let ok = self.byte() == c;
        self.at += ok as usize;
        ok
    }

    fn at_end(&mut self) -> bool {
        self.ws();
        self.at == self.s.len()
    }

    #[inline]
    fn null(&mut self) -> bool {
        self.ws();
        let ok = self.s.get(self.at..self.at + 4) == Some(b"null");
        self.at += 4 * ok as usize;
        ok
    }

    fn literal(&mut self) -> Option<()> {
        if self.null() {
            return Some(());
        }
        let rest = &self.s[self.at..];
        let n = [&b"true"[..], b"false"].iter().find(|l| rest.starts_with(l))?.len();
        self.at += n;
        Some(())
    }

    /// An object, `each` called with every key (its raw text) and the reader at its value.
    fn object(&mut self, mut each: impl FnMut(&mut Self, &[u8]) -> Option<()>) -> Option<()> {
        if !self.eat(b'{') {
            return None;
        }
        if self.eat(b'}') {
            return Some(());
        }
        loop {
            let (key, escaped) = self.string()?;
            // serde reads keys as text: an escaped key is left to it, and so is one not UTF-8.
            if escaped || std::str::from_utf8(key).is_err() || !self.eat(b':') {
                return None;
            }
            each(self, key)?;
            if self.eat(b'}') {
                return Some(());
            }
            if !self.eat(b',') {
                return None;
            }
        }
    }

    /// A string's raw bytes between its quotes, and whether it has escapes;
    /// checked as serde checks a string it skips (valid escapes, no control
    /// characters). Whether the bytes are UTF-8 is the caller's question.
    fn string(&mut self) -> Option<(&'a [u8], bool)> {
        if !self.eat(b'"') {
            return None;
        }
        let start = self.at;
        let mut escaped = false;
        loop {
            let i = self.s[self.at..].iter().position(|&c| c == b'"' || c == b'\\' || c < 0x20)?;
            self.at += i;
            match self.s[self.at] {
                b'"' => {
                    self.at += 1;
                    return Some((&self.s[start..self.at - 1], escaped));
                }
                b'\\' => {
                    escaped = true;
                    match *self.s.get(self.at + 1)? {
                        b'"' | b'\\' | b'/' | b'b' | b'f' | b'n' | b'r' | b't' => self.at += 2,
                        b'u' if self.s.get(self.at + 2..self.at + 6)?.iter().all(u8::is_ascii_hexdigit) => self.at += 6,
                        _ => return None,
                    }
                }
                _ => return None,
            }
        }
    }

    /// A string value as serde reads it into a `String`.
    fn text(&mut self) -> Option<String> {
        let start = self.at;
        let (raw, escaped) = self.string()?;
        if escaped {
            serde_json::from_slice(&self.s[start..self.at]).ok()
        } else {
            std::str::from_utf8(raw).ok().map(str::to_string)
        }
    }

    /// A number's text, checked against JSON's grammar.
    fn number(&mut self) -> Option<&'a [u8]> {
        self.ws();
        let s = self.s;
        let start = self.at;
        let mut i = start;
        let digits = |i: &mut usize| {
            let from = *i;
            while s.get(*i).is_some_and(u8::is_ascii_digit) {
                *i += 1;
            }
            *i > from
        };
        if s.get(i) == Some(&b'-') {
            i += 1;
        }
        match s.get(i) {
            Some(b'0') => i += 1,
            Some(b'1'..=b'9') => {
                digits(&mut i);
            }
            _ => return None,
        }
        if s.get(i) == Some(&b'.') {
            i += 1;
            if !digits(&mut i) {
                return None;
            }
        }
        if let Some(b'e' | b'E') = s.get(i) {
            i += 1;
            if let Some(b'+' | b'-') = s.get(i) {
                i += 1;
            }
            if !digits(&mut i) {
                return None;
            }
        }
        // A digit right after a leading zero is serde's syntax error.
        if s.get(i).is_some_and(u8::is_ascii_digit) {
            return None;
        }
        self.at = i;
        Some(&s[start..i])
    }

    /// A non-negative integer up to `max`, written plainly (no sign, fraction or exponent).
    #[inline]
    fn uint(&mut self, max: u64) -> Option<u64> {
        self.ws();
        let start = self.at;
        let mut v = 0u64;
        loop {
            let d = self.byte().wrapping_sub(b'0');
            if d > 9 {
                break;
            }
            v = v.wrapping_mul(10).wrapping_add(d as u64);
            self.at += 1;
        }
        let n = self.at - start;
        // No digits, a leading zero, a fraction or exponent, or too long to be sure of `v`.
        if n == 0 || n > 19 || (n > 1 && self.s[start] == b'0') || matches!(self.byte(), b'.' | b'e' | b'E') {
            return None;
        }
        (v <= max).then_some(v)
    }

    /// A number with a fraction or an exponent, as serde reads it into an
    /// `f64` (correctly rounded, `float_roundtrip`). Integers are left to serde,
    /// which reads them as integers first (its `-0` is not `-0.0`). Up to 15
    /// significant digits and a power of ten within 22, the value is the exact
    /// quotient or product of two exact doubles, one rounding (Clinger's fast
    /// path); longer numbers go through the standard library's parser.
    fn float(&mut self) -> Option<f64> {
        const POW10: [f64; 23] = [
            1e0, 1e1, 1e2, 1e3, 1e4, 1e5, 1e6, 1e7, 1e8, 1e9, 1e10, 1e11, 1e12, 1e13, 1e14, 1e15, 1e16, 1e17, 1e18,
            1e19, 1e20, 1e21, 1e22,
        ];
        self.ws();
        let (s, start) = (self.s, self.at);
        let mut i = start;
        let neg = s.get(i) == Some(&b'-');
        i += neg as usize;
        // Digits into `w` (all of them, leading zeros too: at most 15 keeps `w` below 2^53).
        let (mut w, mut n) = (0u64, 0u32);
        fn digits(s: &[u8], i: &mut usize, w: &mut u64) -> u32 {
            let from = *i;
            while let Some(d @ b'0'..=b'9') = s.get(*i) {
                *w = w.wrapping_mul(10).wrapping_add((d - b'0') as u64);
                *i += 1;
            }
            (*i - from) as u32
        }
        match s.get(i) {
            Some(b'0') => {
                i += 1;
                n += 1;
            }
            Some(b'1'..=b'9') => n += digits(s, &mut i, &mut w),
            _ => return None,
        }
        let mut exp = 0i32;
        let mut is_float = false;
        if s.get(i) == Some(&b'.') {
            i += 1;
            let k = digits(s, &mut i, &mut w);
            if k == 0 {
                return None;
            }
            n += k;
            exp -= k as i32;
            is_float = true;
        }
        if let Some(b'e' | b'E') = s.get(i) {
            i += 1;
            let eneg = s.get(i) == Some(&b'-');
            if let Some(b'+' | b'-') = s.get(i) {
                i += 1;
            }
            let from = i;
            let mut e = 0i32;
            while let Some(d @ b'0'..=b'9') = s.get(i) {
                e = e.saturating_mul(10).saturating_add((d - b'0') as i32);
                i += 1;
            }
            if i == from {
                return None;
            }
            exp = exp.saturating_add(if eneg { -e } else { e });
            is_float = true;
        }
        // Integers are serde's; so is a digit after a leading zero (its syntax error).
        if !is_float || s.get(i).is_some_and(u8::is_ascii_digit) {
            return None;
        }
        self.at = i;
        let v = if n <= 15 && (-22..=22).contains(&exp) {
            let m = w as f64;
            if exp < 0 {
                m / POW10[(-exp) as usize]
            } else {
                m * POW10[exp as usize]
            }
        } else {
            // SAFETY: the bytes were just checked to be ASCII digits, signs, `.`, `e` and `E`.
            let t = unsafe { std::str::from_utf8_unchecked(&s[start + neg as usize..i]) };
            t.parse::<f64>().ok()?
        };
        // Out of range is serde's error.
        v.is_finite().then_some(if neg { -v } else { v })
    }

    /// Skips any value as serde skips an ignored one. `strict`: strings must
    /// be UTF-8 without escapes (where serde reads them as text).
    fn skip(&mut self, depth: usize, strict: bool) -> Option<()> {
        if depth > MAX_DEPTH {
            return None;
        }
        match self.peek()? {
            b'"' => {
                let (raw, escaped) = self.string()?;
                if strict && (escaped || std::str::from_utf8(raw).is_err()) {
                    return None;
                }
            }
            b'{' => self.object(|r, _| r.skip(depth + 1, strict))?,
            b'[' => {
                self.at += 1;
                if !self.eat(b']') {
                    loop {
                        self.skip(depth + 1, strict)?;
                        if self.eat(b']') {
                            break;
                        }
                        if !self.eat(b',') {
                            return None;
                        }
                    }
                }
            }
            b'-' | b'0'..=b'9' => {
                self.number()?;
            }
            _ => self.literal()?,
        }
        Some(())
    }

    /// `output_ids`: a list of u32.
    fn ids(&mut self) -> Option<Vec<u32>> {
        let mut ids = Vec::with_capacity(64);
        if !self.eat(b'[') {
            return None;
        }
        if self.eat(b']') {
            return Some(ids);
        }
        loop {
            ids.push(self.uint(u32::MAX as u64)? as u32);
            if self.eat(b']') {
                return Some(ids);
            }
            if !self.eat(b',') {
                return None;
            }
        }
    }

    fn meta(&mut self) -> Option<Meta> {
        let mut m = Meta::default();
        let (mut lps, mut finish, mut version) = (false, false, false);
        self.object(|r, key| {
            match key {
                b"output_token_logprobs" if !lps => {
                    lps = true;
                    m.logprobs = Some(r.logprobs()?);
                }
                b"finish_reason" if !finish => {
                    finish = true;
                    m.finish = r.finish_reason()?;
                }
                b"weight_version" if !version => {
                    version = true;
                    m.weight_version = r.weight_version()?;
                }
                b"output_token_logprobs" | b"finish_reason" | b"weight_version" => return None,
                _ => r.skip(0, false)?,
            }
            Some(())
        })?;
        Some(m)
    }

    /// `[[logprob or null, id, anything], …]`.
    fn logprobs(&mut self) -> Option<(Vec<f32>, Vec<u32>)> {
        let mut lps = Vec::with_capacity(64);
        let mut ids = Vec::with_capacity(64);
        if !self.eat(b'[') {
            return None;
        }
        if self.eat(b']') {
            return Some((lps, ids));
        }
        loop {
            if !self.eat(b'[') {
                return None;
            }
            lps.push(if self.null() { 0.0 } else { self.float()? as f32 });
            if !self.eat(b',') {
                return None;
            }
            ids.push(self.uint(u32::MAX as u64)? as u32);
            if !self.eat(b',') {
                return None;
            }
            self.skip(1, false)?;
            if !self.eat(b']') {
                return None;
            }
            if self.eat(b']') {
                return Some((lps, ids));
            }
            if !self.eat(b',') {
                return None;
            }
        }
    }

    /// `finish_reason`: `null`, a string, or an object whose `type` is a string or `null`.
    fn finish_reason(&mut self) -> Option<Option<String>> {
        match self.peek()? {
            b'"' => self.text().map(Some),
            b'{' => {
                let mut kind: Option<Option<String>> = None;
                self.object(|r, key| {
                    if key == b"type" {
                        if kind.is_some() {
                            return None;
                        }
                        kind = Some(if r.null() { None } else { Some(r.text()?) });
                        Some(())
                    } else {
                        // Untagged: serde reads the whole object as values, strings as text.
                        r.skip(1, true)
                    }
                })?;
                Some(Some(kind.flatten().unwrap_or_else(|| "unknown".into())))
            }
            _ if self.null() => Some(None),
            _ => None,
        }
    }

    /// `weight_version`: a string, a plain non-negative integer (its digits),
    /// or `null`, `true`, `false` (no version).
    fn weight_version(&mut self) -> Option<Option<String>> {
        match self.peek()? {
            b'"' => self.text().map(Some),
            b'0'..=b'9' => {
                let start = self.at;
                self.uint(u64::MAX / 10)?;
                Some(Some(String::from_utf8_lossy(&self.s[start..self.at]).into_owned()))
            }
            b'n' | b't' | b'f' => self.literal().map(|_| None),
            _ => None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use arl_core::rng::Rng;

    /// Numbers read as serde reads them into an `f64`, bit for bit.
    #[test]
    fn floats_are_read_as_serde_reads_them() {
        let mut rng = Rng::new(5);
        for i in 0..20_000 {
            let x = (rng.below(1 << 53) as f64 / (1u64 << rng.below(64)) as f64) * if i % 2 == 0 { -1.0 } else { 1.0 };
            let text = match i % 5 {
                0 => format!("{:?}", x as f32 as f64),
                1 => format!("{:e}", x),
                2 => format!("{:.1$}", x, rng.below(18) as usize + 1),
                3 => format!("-{}.{}e{}", rng.below(10), rng.below(1_000_000_000), rng.below(50) as i64 - 25),
                _ => format!("{:?}", x),
            };
            let text = if text.contains(['.', 'e']) { text } else { text + ".0" };
            let serde: Option<f64> = serde_json::from_str(&text).ok();
            let mut r = Reader { s: text.as_bytes(), at: 0 };
            let mine = r.float();
            assert_eq!(mine.map(f64::to_bits), serde.map(f64::to_bits), "{text}");
            assert!(mine.is_none() || r.at_end(), "{text}");
        }
    }
}
