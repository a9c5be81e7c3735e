//! A small expression evaluator: exact rationals where possible, f64
//! otherwise, with variables evaluated at given points.

#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) enum Num {
    Rat(i128, i128),
    Real(f64),
}

fn gcd(mut a: i128, mut b: i128) -> i128 {
    a = a.abs();
    b = b.abs();
    while b != 0 {
        (a, b) = (b, a % b);
    }
    a
}

impl Num {
    fn rat(n: i128, d: i128) -> Num {
        if d == 0 {
            return Num::Real(f64::NAN);
        }
        // i128::MIN has no positive counterpart (`abs`, `-n` overflow): leave exact arithmetic.
        if n == i128::MIN || d == i128::MIN {
            return Num::Real(n as f64 / d as f64);
        }
        let g = gcd(n, d).max(1);
        let (n, d) = (n / g, d / g);
        if d < 0 {
            Num::Rat(-n, -d)
        } else {
            Num::Rat(n, d)
        }
    }
    pub(crate) fn f(self) -> f64 {
        match self {
            Num::Rat(n, d) => n as f64 / d as f64,
            Num::Real(x) => x,
        }
    }
    fn add(self, o: Num) -> Num {
        if let (Num::Rat(a, b), Num::Rat(c, d)) = (self, o) {
            if let (Some(x), Some(y), Some(z)) = (a.checked_mul(d), c.checked_mul(b), b.checked_mul(d)) {
                if let Some(s) = x.checked_add(y) {
                    return Num::rat(s, z);
                }
            }
        }
        Num::Real(self.f() + o.f())
    }
    fn neg(self) -> Num {
        match self {
            Num::Rat(a, b) => Num::Rat(-a, b),
            Num::Real(x) => Num::Real(-x),
        }
    }
    fn mul(self, o: Num) -> Num {
        if let (Num::Rat(a, b), Num::Rat(c, d)) = (self, o) {
            if let (Some(x), Some(y)) = (a.checked_mul(c), b.checked_mul(d)) {
                return Num::rat(x, y);
            }
        }
        Num::Real(self.f() * o.f())
    }
    fn div(self, o: Num) -> Num {
        match o {
            Num::Rat(0, _) => Num::Real(f64::NAN),
            Num::Rat(c, d) => self.mul(Num::rat(d, c)),
            Num::Real(x) => Num::Real(self.f() / x),
        }
    }
    fn pow(self, o: Num) -> Num {
        if let (Num::Rat(a, b), Num::Rat(e, 1)) = (self, o) {
            if (0..=64).contains(&e) {
                if let (Some(x), Some(y)) = (a.checked_pow(e as u32), b.checked_pow(e as u32)) {
                    return Num::rat(x, y);
                }
            } else if (-64..0).contains(&e) && a != 0 {
                if let (Some(x), Some(y)) = (a.checked_pow((-e) as u32), b.checked_pow((-e) as u32)) {
                    return Num::rat(y, x);
                }
            }
        }
        Num::Real(self.f().powf(o.f()))
    }
    fn sqrt(self) -> Num {
        if let Num::Rat(a, b) = self {
            if a >= 0 {
                let (ra, rb) = (isqrt(a), isqrt(b));
                if ra * ra == a && rb * rb == b {
                    return Num::rat(ra, rb);
                }
            }
        }
        Num::Real(self.f().sqrt())
    }
}

pub(crate) fn isqrt(n: i128) -> i128 {
    if n < 0 {
        return -1;
    }
    // The f64 estimate can be above the root: near i128::MAX its square overflows.
    let mut x = (n as f64).sqrt() as i128;
    while x.checked_mul(x).is_none_or(|sq| sq > n) {
        x -= 1;
    }
    while (x + 1).checked_mul(x + 1).is_some_and(|sq| sq <= n) {
        x += 1;
    }
    x
}

#[derive(Debug, Clone, PartialEq)]
enum Tok {
    Num(Num),
    Var(char),
    Op(u8),
    Open(u8),
    Close(u8),
    Cmd(String),
}

fn tokenize(s: &str) -> Option<Vec<Tok>> {
    let b = s.as_bytes();
    let mut out = Vec::new();
    let mut i = 0;
    while i < b.len() {
        let c = b[i];
        match c {
            b' ' => i += 1,
            b'0'..=b'9' | b'.' => {
                let st = i;
                while i < b.len() && (b[i].is_ascii_digit() || b[i] == b'.') {
                    i += 1;
                }
                out.push(Tok::Num(parse_decimal(&s[st..i])?));
            }
            b'+' | b'-' | b'*' | b'/' | b'^' => {
                out.push(Tok::Op(c));
                i += 1;
            }
            b'(' | b'[' | b'{' => {
                out.push(Tok::Open(c));
                i += 1;
            }
            b')' | b']' | b'}' => {
                out.push(Tok::Close(c));
                i += 1;
            }
            b'\\' => {
                let st = i + 1;
                i += 1;
                while i < b.len() && b[i].is_ascii_alphabetic() {
                    i += 1;
                }
                if i == st {
                    return None;
                }
                out.push(Tok::Cmd(s[st..i].to_string()));
            }
            b'a'..=b'z' | b'A'..=b'Z' => {
                out.push(Tok::Var(c as char));
                i += 1;
            }
            _ => return None,
        }
    }
    Some(out)
}

fn parse_decimal(s: &str) -> Option<Num> {
    let (int, frac) = match s.find('.') {
        Some(p) => (&s[..p], &s[p + 1..]),
        None => (s, ""),
    };
    if frac.contains('.') || (int.is_empty() && frac.is_empty()) || int.len() + frac.len() > 30 {
        return s.parse::<f64>().ok().map(Num::Real);
    }
    let digits = format!("{int}{frac}");
    let n: i128 = digits.parse().ok()?;
    let d = 10i128.checked_pow(frac.len() as u32)?;
    Some(Num::rat(n, d))
}

/// An expression tree (kept so expressions with variables can be evaluated at several points).
#[derive(Debug, Clone)]
pub(crate) enum Ex {
    N(Num),
    V(char),
    Add(Box<Ex>, Box<Ex>),
    Mul(Box<Ex>, Box<Ex>),
    Div(Box<Ex>, Box<Ex>),
    Pow(Box<Ex>, Box<Ex>),
    Neg(Box<Ex>),
    Sqrt(Box<Ex>),
    Root(Box<Ex>, Box<Ex>),
}

struct Parser {
    t: Vec<Tok>,
    i: usize,
}

impl Parser {
    fn peek(&self) -> Option<&Tok> {
        self.t.get(self.i)
    }
    fn next(&mut self) -> Option<Tok> {
        let x = self.t.get(self.i).cloned();
        self.i += 1;
        x
    }
    fn expr(&mut self) -> Option<Ex> {
        let mut a = self.term()?;
        loop {
            match self.peek() {
                Some(Tok::Op(b'+')) => {
                    self.i += 1;
                    a = Ex::Add(Box::new(a), Box::new(self.term()?));
                }
                Some(Tok::Op(b'-')) => {
                    self.i += 1;
                    a = Ex::Add(Box::new(a), Box::new(Ex::Neg(Box::new(self.term()?))));
                }
                _ => return Some(a),
            }
        }
    }
    fn term(&mut self) -> Option<Ex> {
        let mut a = self.unary()?;
        loop {
            match self.peek() {
                Some(Tok::Op(b'*')) => {
                    self.i += 1;
                    a = Ex::Mul(Box::new(a), Box::new(self.unary()?));
                }
                Some(Tok::Op(b'/')) => {
                    self.i += 1;
                    a = Ex::Div(Box::new(a), Box::new(self.unary()?));
                }
                // Implicit multiplication: `2\pi`, `3x`, `2(x+1)`, `x y`.
                Some(Tok::Num(_)) | Some(Tok::Var(_)) | Some(Tok::Open(_)) | Some(Tok::Cmd(_)) => {
                    a = Ex::Mul(Box::new(a), Box::new(self.power()?));
                }
                _ => return Some(a),
            }
        }
    }
    fn unary(&mut self) -> Option<Ex> {
        match self.peek() {
            Some(Tok::Op(b'-')) => {
                self.i += 1;
                Some(Ex::Neg(Box::new(self.unary()?)))
            }
            Some(Tok::Op(b'+')) => {
                self.i += 1;
                self.unary()
            }
            _ => self.power(),
        }
    }
    fn power(&mut self) -> Option<Ex> {
        let base = self.primary()?;
        if let Some(Tok::Op(b'^')) = self.peek() {
            self.i += 1;
            let e = match self.peek() {
                Some(Tok::Op(b'-')) => {
                    self.i += 1;
                    Ex::Neg(Box::new(self.primary()?))
                }
                _ => self.primary_single()?,
            };
            return Some(Ex::Pow(Box::new(base), Box::new(e)));
        }
        Some(base)
    }
    /// An exponent or `\frac` argument written without braces: one digit or letter.
    fn primary_single(&mut self) -> Option<Ex> {
        match self.peek()? {
            Tok::Num(Num::Rat(n, 1)) if *n >= 10 => {
                // `x^23` is x^2 * 3 in TeX, but nobody means that; take it whole.
                self.primary()
            }
            _ => self.primary(),
        }
    }
    fn group(&mut self) -> Option<Ex> {
        match self.peek()? {
            Tok::Open(b'{') => self.primary(),
            Tok::Num(Num::Rat(n, 1)) if *n >= 10 => {
                // `\frac12`: TeX takes one digit per argument; the rest stays.
                let s = n.to_string();
                let first: i128 = s[..1].parse().ok()?;
                let rest: i128 = s[1..].parse().ok()?;
                self.t[self.i] = Tok::Num(Num::Rat(rest, 1));
                Some(Ex::N(Num::Rat(first, 1)))
            }
            _ => self.primary(),
        }
    }
    fn primary(&mut self) -> Option<Ex> {
        match self.next()? {
            Tok::Num(n) => Some(Ex::N(n)),
            Tok::Var(c) => Some(Ex::V(c)),
            Tok::Open(o) => {
                let e = self.expr()?;
                let want = match o {
                    b'(' => b')',
                    b'[' => b']',
                    _ => b'}',
                };
                match self.next()? {
                    Tok::Close(c) if c == want => Some(e),
                    _ => None,
                }
            }
            Tok::Cmd(c) => match c.as_str() {
                "frac" => {
                    let a = self.group()?;
                    let b = self.group()?;
                    Some(Ex::Div(Box::new(a), Box::new(b)))
                }
                "sqrt" => {
                    if let Some(Tok::Open(b'[')) = self.peek() {
                        self.i += 1;
                        let n = self.expr()?;
                        if self.next()? != Tok::Close(b']') {
                            return None;
                        }
                        let x = self.group()?;
                        return Some(Ex::Root(Box::new(x), Box::new(n)));
                    }
                    Some(Ex::Sqrt(Box::new(self.group()?)))
                }
                "pi" => Some(Ex::N(Num::Real(std::f64::consts::PI))),
                _ => None,
            },
            _ => None,
        }
    }
}

pub(crate) fn eval(e: &Ex, env: &[(char, f64)]) -> Num {
    match e {
        Ex::N(n) => *n,
        Ex::V(c) => match env.iter().find(|(v, _)| v == c) {
            Some((_, x)) => Num::Real(*x),
            None => Num::Real(f64::NAN),
        },
        Ex::Add(a, b) => eval(a, env).add(eval(b, env)),
        Ex::Mul(a, b) => eval(a, env).mul(eval(b, env)),
        Ex::Div(a, b) => eval(a, env).div(eval(b, env)),
        Ex::Pow(a, b) => eval(a, env).pow(eval(b, env)),
        Ex::Neg(a) => eval(a, env).neg(),
        Ex::Sqrt(a) => eval(a, env).sqrt(),
        Ex::Root(a, n) => Num::Real(eval(a, env).f().powf(1.0 / eval(n, env).f())),
    }
}

pub(crate) fn vars(e: &Ex, out: &mut Vec<char>) {
    match e {
        Ex::N(_) => {}
        Ex::V(c) => {
            if !out.contains(c) {
                out.push(*c)
            }
        }
        Ex::Add(a, b) | Ex::Mul(a, b) | Ex::Div(a, b) | Ex::Pow(a, b) | Ex::Root(a, b) => {
            vars(a, out);
            vars(b, out);
        }
        Ex::Neg(a) | Ex::Sqrt(a) => vars(a, out),
    }
}

/// Longest expression evaluated, in tokens: the parser, `eval` and the tree's
/// drop all recurse, so an answer of thousands of nested brackets or terms
/// would overflow a thread's stack. Real answers are far shorter; longer ones
/// are compared as strings.
const MAX_EXPR_TOKENS: usize = 512;

pub(crate) fn parse_expr(s: &str) -> Option<Ex> {
    if s.is_empty() {
        return None;
    }
    let t = tokenize(s)?;
    if t.len() > MAX_EXPR_TOKENS {
        return None;
    }
    let mut p = Parser { t, i: 0 };
    let e = p.expr()?;
    if p.i != p.t.len() {
        return None;
    }
    Some(e)
}

pub(crate) fn num_eq(a: Num, b: Num, tol: f64) -> bool {
    match (a, b) {
        (Num::Rat(x, y), Num::Rat(z, w)) if tol == 0.0 => x == z && y == w,
        _ => {
            let (x, y) = (a.f(), b.f());
            if !x.is_finite() || !y.is_finite() {
                return false;
            }
            let t = if tol > 0.0 { tol } else { 1e-9 };
            (x - y).abs() <= t * x.abs().max(y.abs()).max(1e-12)
        }
    }
}
