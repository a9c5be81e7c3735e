//! The `calculator` tool: evaluates an arithmetic expression without running
//! any code. Integers are exact (i128, checked); a result that is not an
//! integer, or overflows, falls back to f64.
//!
//! Grammar (Python precedence): `+ - * / // % **`, unary `+ -`, parentheses,
//! integer/decimal/scientific literals, `^` as a synonym of `**` (models write
//! it), functions `abs sqrt min max round floor ceil log exp`, constants `pi e`.

#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Num {
    Int(i128),
    Float(f64),
}

impl Num {
    fn f(self) -> f64 {
        match self {
            Num::Int(i) => i as f64,
            Num::Float(x) => x,
        }
    }
}

impl std::fmt::Display for Num {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Num::Int(i) => write!(f, "{i}"),
            Num::Float(x) if x.is_finite() && x.fract() == 0.0 && x.abs() < 1e16 => write!(f, "{}", *x as i128),
            Num::Float(x) => write!(f, "{x}"),
        }
    }
}

/// Evaluates `expr`; the error says what was wrong and where.
pub fn eval(expr: &str) -> Result<Num, String> {
    let toks = lex(expr)?;
    let mut p = Parser { toks, pos: 0, depth: 0 };
    let v = p.expr()?;
    if p.pos != p.toks.len() {
        return Err(format!("unexpected `{}`", p.toks[p.pos].text()));
    }
    match v {
        Num::Float(x) if !x.is_finite() => Err("result is not a finite number".into()),
        v => Ok(v),
    }
}

#[derive(Debug, Clone, PartialEq)]
enum Tok {
    Num(Num),
    Ident(String),
    Op(&'static str),
}

impl Tok {
    fn text(&self) -> String {
        match self {
            Tok::Num(n) => n.to_string(),
            Tok::Ident(s) => s.clone(),
            Tok::Op(o) => o.to_string(),
        }
    }
}

fn lex(s: &str) -> Result<Vec<Tok>, String> {
    let b = s.as_bytes();
    let mut i = 0;
    let mut out = Vec::new();
    if s.len() > 10_000 {
        return Err("expression too long".into());
    }
    while i < b.len() {
        let c = b[i];
        if c.is_ascii_whitespace() || c == b'_' && i > 0 && b[i - 1].is_ascii_digit() {
            i += 1;
            continue;
        }
        if c.is_ascii_digit() || c == b'.' {
            let start = i;
            let mut float = false;
            while i < b.len() && (b[i].is_ascii_digit() || b[i] == b'.' || b[i] == b'_') {
                float |= b[i] == b'.';
                i += 1;
            }
            if i < b.len() && (b[i] == b'e' || b[i] == b'E') {
                let mut j = i + 1;
                if j < b.len() && (b[j] == b'+' || b[j] == b'-') {
                    j += 1;
                }
                if j < b.len() && b[j].is_ascii_digit() {
                    float = true;
                    i = j;
                    while i < b.len() && b[i].is_ascii_digit() {
                        i += 1;
                    }
                }
            }
            let text: String = s[start..i].chars().filter(|&c| c != '_').collect();
            let n = if float {
                Num::Float(text.parse::<f64>().map_err(|_| format!("bad number `{text}`"))?)
            } else {
                match text.parse::<i128>() {
                    Ok(v) => Num::Int(v),
                    Err(_) => Num::Float(text.parse::<f64>().map_err(|_| format!("bad number `{text}`"))?),
                }
            };
            out.push(Tok::Num(n));
            continue;
        }
        if c.is_ascii_alphabetic() {
            let start = i;
            while i < b.len() && (b[i].is_ascii_alphanumeric() || b[i] == b'_') {
                i += 1;
            }
            out.push(Tok::Ident(s[start..i].to_ascii_lowercase()));
            continue;
        }
        let two = if i + 1 < b.len() { &s[i..i + 2] } else { "" };
        let op: &'static str = match two {
            "**" => "**",
            "//" => "//",
            _ => match c {
                b'+' => "+",
                b'-' => "-",
                b'*' => "*",
                b'/' => "/",
                b'%' => "%",
                b'^' => "**",
                b'(' => "(",
                b')' => ")",
                b',' => ",",
                _ => {
                    let ch = s[i..].chars().next().unwrap_or('?');
                    match ch {
                        '×' | '·' => "*",
                        '÷' => "/",
                        '−' => "-",
                        _ => return Err(format!("unexpected character `{ch}`")),
                    }
                }
            },
        };
        i += if op.len() == 2 && two == op { 2 } else { s[i..].chars().next().map_or(1, char::len_utf8) };
        out.push(Tok::Op(op));
    }
    Ok(out)
}

struct Parser {
    toks: Vec<Tok>,
    pos: usize,
    depth: u32,
}

impl Parser {
    fn peek_op(&self) -> Option<&'static str> {
        match self.toks.get(self.pos) {
            Some(Tok::Op(o)) => Some(o),
            _ => None,
        }
    }

    fn expect(&mut self, op: &str) -> Result<(), String> {
        if self.peek_op() == Some(op) {
            self.pos += 1;
            Ok(())
        } else {
            Err(format!("expected `{op}`"))
        }
    }

    fn expr(&mut self) -> Result<Num, String> {
        let mut v = self.term()?;
        while let Some(op @ ("+" | "-")) = self.peek_op() {
            self.pos += 1;
            let r = self.term()?;
            v = binop(op, v, r)?;
        }
        Ok(v)
    }

    fn term(&mut self) -> Result<Num, String> {
        let mut v = self.unary()?;
        while let Some(op @ ("*" | "/" | "//" | "%")) = self.peek_op() {
            self.pos += 1;
            let r = self.unary()?;
            v = binop(op, v, r)?;
        }
        Ok(v)
    }

    fn unary(&mut self) -> Result<Num, String> {
        match self.peek_op() {
            Some("-") => {
                self.pos += 1;
                let v = self.unary()?;
                binop("-", Num::Int(0), v)
            }
            Some("+") => {
                self.pos += 1;
                self.unary()
            }
            _ => self.power(),
        }
    }

    // `**` binds tighter than unary minus on its left and is right-associative: -2**2 == -4.
    fn power(&mut self) -> Result<Num, String> {
        let base = self.atom()?;
        if self.peek_op() == Some("**") {
            self.pos += 1;
            let exp = self.unary()?;
            return binop("**", base, exp);
        }
        Ok(base)
    }

    fn atom(&mut self) -> Result<Num, String> {
        self.depth += 1;
        if self.depth > 200 {
            return Err("expression nested too deeply".into());
        }
        let r = self.atom_inner();
        self.depth -= 1;
        r
    }

    fn atom_inner(&mut self) -> Result<Num, String> {
        let t = self.toks.get(self.pos).cloned().ok_or("unexpected end of expression")?;
        self.pos += 1;
        match t {
            Tok::Num(n) => Ok(n),
            Tok::Op("(") => {
                let v = self.expr()?;
                self.expect(")")?;
                Ok(v)
            }
            Tok::Ident(name) => {
                match name.as_str() {
                    "pi" => return Ok(Num::Float(std::f64::consts::PI)),
                    "e" => return Ok(Num::Float(std::f64::consts::E)),
                    _ => {}
                }
                self.expect("(").map_err(|_| format!("unknown name `{name}`"))?;
                let mut args = vec![self.expr()?];
                while self.peek_op() == Some(",") {
                    self.pos += 1;
                    args.push(self.expr()?);
                }
                self.expect(")")?;
                call(&name, &args)
            }
            Tok::Op(o) => Err(format!("unexpected `{o}`")),
        }
    }
}

fn call(name: &str, a: &[Num]) -> Result<Num, String> {
    let one = || -> Result<Num, String> {
        if a.len() == 1 {
            Ok(a[0])
        } else {
            Err(format!("`{name}` takes one argument"))
        }
    };
    Ok(match name {
        "abs" => match one()? {
            Num::Int(i) => Num::Int(i.checked_abs().ok_or("overflow")?),
            Num::Float(x) => Num::Float(x.abs()),
        },
        "sqrt" => {
            let v = one()?;
            if v.f() < 0.0 {
                return Err("square root of a negative number".into());
            }
            if let Num::Int(i) = v {
                let r = (i as f64).sqrt().round() as i128;
                if r.checked_mul(r) == Some(i) {
                    return Ok(Num::Int(r));
                }
            }
            Num::Float(v.f().sqrt())
        }
        "floor" => float_to_int(one()?.f().floor()),
        "ceil" => float_to_int(one()?.f().ceil()),
        "round" => match a {
            [Num::Int(i)] => Num::Int(*i),
            // Python's round(): half to even.
            [x] => float_to_int(x.f().round_ties_even()),
            [x, Num::Int(d)] => {
                let m = 10f64.powi(*d as i32);
                Num::Float((x.f() * m).round_ties_even() / m)
            }
            _ => return Err("`round` takes one or two arguments".into()),
        },
        "log" => match a {
            [x] => Num::Float(x.f().ln()),
            [x, b] => Num::Float(x.f().ln() / b.f().ln()),
            _ => return Err("`log` takes one or two arguments".into()),
        },
        "exp" => Num::Float(one()?.f().exp()),
        "min" | "max" => {
            if a.is_empty() {
                return Err(format!("`{name}` needs arguments"));
            }
            let mut best = a[0];
            for &x in &a[1..] {
                let better = if name == "min" { x.f() < best.f() } else { x.f() > best.f() };
                if better {
                    best = x;
                }
            }
            best
        }
        _ => return Err(format!("unknown function `{name}`")),
    })
}

fn float_to_int(x: f64) -> Num {
    if x.is_finite() && x.abs() < 1e30 {
        Num::Int(x as i128)
    } else {
        Num::Float(x)
    }
}

fn binop(op: &str, l: Num, r: Num) -> Result<Num, String> {
    use Num::*;
    if let (Int(a), Int(b)) = (l, r) {
        let exact = match op {
            "+" => a.checked_add(b),
            "-" => a.checked_sub(b),
            "*" => a.checked_mul(b),
            "/" => {
                if b == 0 {
                    return Err("division by zero".into());
                }
                if a % b == 0 {
                    a.checked_div(b)
                } else {
                    None
                }
            }
            // Python floors integer division and takes the divisor's sign for `%`.
            "//" => {
                if b == 0 {
                    return Err("division by zero".into());
                }
                Some(floor_div(a, b))
            }
            "%" => {
                if b == 0 {
                    return Err("division by zero".into());
                }
                Some(a - b * floor_div(a, b))
            }
            "**" => {
                if b < 0 {
                    None
                } else if b > 100_000 {
                    return Err("exponent too large".into());
                } else {
                    u32::try_from(b).ok().and_then(|e| a.checked_pow(e))
                }
            }
            _ => return Err(format!("unknown operator `{op}`")),
        };
        if let Some(v) = exact {
            return Ok(Int(v));
        }
    }
    let (a, b) = (l.f(), r.f());
    let v = match op {
        "+" => a + b,
        "-" => a - b,
        "*" => a * b,
        "/" | "//" | "%" if b == 0.0 => return Err("division by zero".into()),
        "/" => a / b,
        "//" => (a / b).floor(),
        "%" => a - b * (a / b).floor(),
        "**" => a.powf(b),
        _ => return Err(format!("unknown operator `{op}`")),
    };
    if v.is_nan() {
        return Err("result is not a number".into());
    }
    Ok(Float(v))
}

fn floor_div(a: i128, b: i128) -> i128 {
    let q = a / b;
    if (a % b != 0) && ((a < 0) != (b < 0)) {
        q - 1
    } else {
        q
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn s(e: &str) -> String {
        match eval(e) {
            Ok(v) => v.to_string(),
            Err(e) => format!("error: {e}"),
        }
    }

    #[test]
    fn python_semantics() {
        assert_eq!(s("347*29"), "10063");
        assert_eq!(s("2 + 3 * 4"), "14");
        assert_eq!(s("-2**2"), "-4");
        assert_eq!(s("2**3**2"), "512");
        assert_eq!(s("7 // -2"), "-4");
        assert_eq!(s("-7 % 3"), "2");
        assert_eq!(s("6 / 3"), "2");
        assert_eq!(s("1 / 4"), "0.25");
        assert_eq!(s("sqrt(144) + abs(-3)"), "15");
        assert_eq!(s("2^10"), "1024");
        assert_eq!(s("12345678901234567890 * 10"), "123456789012345678900");
        assert_eq!(s("round(2.5)"), "2");
        assert_eq!(s("max(1, 7, 3)"), "7");
        assert!(s("1/0").starts_with("error: division by zero"));
        assert!(s("__import__('os')").starts_with("error"));
        assert!(s("2 +").starts_with("error"));
        assert!(s("(((1)").starts_with("error"));
    }

    #[test]
    fn random_integer_expressions_match_i128_arithmetic() {
        let mut rng = arl_core::rng::Rng::new(11);
        for _ in 0..2000 {
            let a = rng.range(-10_000, 10_000) as i128;
            let b = rng.range(-10_000, 10_000) as i128;
            let c = rng.range(1, 500) as i128;
            let expr = format!("({a}) * ({b}) - ({c}) + ({a}) % {c}");
            let want = a * b - c + a.rem_euclid(c);
            assert_eq!(eval(&expr), Ok(Num::Int(want)), "{expr}");
        }
    }
}
