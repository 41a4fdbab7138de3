//! The `calculator` tool: a hand-written arithmetic evaluator (a tokenizer
//! and a recursive-descent parser that evaluates as it parses) over `f64`.
//! No shell and no `eval`: only numbers, operators, a fixed set of functions
//! and the constants `pi` and `e`. Errors name the column they occur at.

use futures::future::BoxFuture;
use serde_json::json;

use super::required_str;
use crate::tools::{Tool, ToolContext, ToolError};
use crate::types::ToolSpec;

/// Longest expression accepted, in characters.
const MAX_LEN: usize = 10_000;
/// Deepest nesting of parentheses, unary signs and powers accepted.
const MAX_DEPTH: usize = 200;

const CONSTANTS: &[(&str, f64)] = &[("pi", std::f64::consts::PI), ("e", std::f64::consts::E)];

/// How many arguments a function takes.
#[derive(Clone, Copy)]
enum Arity {
    Exactly(usize),
    AtLeastOne,
}

const FUNCTIONS: &[(&str, Arity)] = &[
    ("sqrt", Arity::Exactly(1)),
    ("abs", Arity::Exactly(1)),
    ("ln", Arity::Exactly(1)),
    ("log10", Arity::Exactly(1)),
    ("log2", Arity::Exactly(1)),
    ("exp", Arity::Exactly(1)),
    ("sin", Arity::Exactly(1)),
    ("cos", Arity::Exactly(1)),
    ("tan", Arity::Exactly(1)),
    ("asin", Arity::Exactly(1)),
    ("acos", Arity::Exactly(1)),
    ("atan", Arity::Exactly(1)),
    ("atan2", Arity::Exactly(2)),
    ("floor", Arity::Exactly(1)),
    ("ceil", Arity::Exactly(1)),
    ("round", Arity::Exactly(1)),
    ("min", Arity::AtLeastOne),
    ("max", Arity::AtLeastOne),
    ("pow", Arity::Exactly(2)),
];

fn apply(name: &str, a: &[f64]) -> f64 {
    match name {
        "sqrt" => a[0].sqrt(),
        "abs" => a[0].abs(),
        "ln" => a[0].ln(),
        "log10" => a[0].log10(),
        "log2" => a[0].log2(),
        "exp" => a[0].exp(),
        "sin" => a[0].sin(),
        "cos" => a[0].cos(),
        "tan" => a[0].tan(),
        "asin" => a[0].asin(),
        "acos" => a[0].acos(),
        "atan" => a[0].atan(),
        "atan2" => a[0].atan2(a[1]),
        "floor" => a[0].floor(),
        "ceil" => a[0].ceil(),
        "round" => a[0].round(),
        "min" => a.iter().copied().fold(f64::INFINITY, f64::min),
        "max" => a.iter().copied().fold(f64::NEG_INFINITY, f64::max),
        "pow" => a[0].powf(a[1]),
        _ => unreachable!("apply is only called with names from FUNCTIONS"),
    }
}

/// Why an expression could not be evaluated. `message` already says where.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[error("{message}")]
pub struct CalcError {
    /// 1-based column (in characters) the problem was found at.
    pub column: usize,
    pub message: String,
}

/// Returns a `CalcError` at `column` with a formatted message.
macro_rules! bail {
    ($column:expr, $($fmt:tt)+) => {
        return Err(CalcError { column: $column, message: format!($($fmt)+) })
    };
}

#[derive(Debug, Clone, PartialEq)]
enum Kind {
    Num(f64),
    Ident(String),
    Plus,
    Minus,
    Star,
    Slash,
    Percent,
    Pow,
    LParen,
    RParen,
    Comma,
    End,
}

#[derive(Debug, Clone)]
struct Token {
    kind: Kind,
    column: usize,
    text: String,
}

fn tokenize(src: &str) -> Result<Vec<Token>, CalcError> {
    let chars: Vec<char> = src.chars().collect();
    let mut out = Vec::new();
    let mut i = 0;
    while i < chars.len() {
        let c = chars[i];
        let column = i + 1;
        if c.is_whitespace() {
            i += 1;
            continue;
        }
        let start = i;
        let kind = if c.is_ascii_digit() || c == '.' {
            while i < chars.len() && (chars[i].is_ascii_digit() || chars[i] == '.') {
                i += 1;
            }
            // An exponent only if digits follow: `2e` stays `2` then `e`.
            if i < chars.len() && matches!(chars[i], 'e' | 'E') {
                let mut j = i + 1;
                if j < chars.len() && matches!(chars[j], '+' | '-') {
                    j += 1;
                }
                if j < chars.len() && chars[j].is_ascii_digit() {
                    i = j;
                    while i < chars.len() && chars[i].is_ascii_digit() {
                        i += 1;
                    }
                }
            }
            let text: String = chars[start..i].iter().collect();
            match text.parse::<f64>() {
                Ok(v) if v.is_finite() => Kind::Num(v),
                Ok(_) => bail!(column, "number '{text}' at column {column} is too large"),
                Err(_) => bail!(column, "malformed number '{text}' at column {column}"),
            }
        } else if c.is_alphabetic() || c == '_' {
            while i < chars.len() && (chars[i].is_alphanumeric() || chars[i] == '_') {
                i += 1;
            }
            Kind::Ident(chars[start..i].iter().collect::<String>().to_lowercase())
        } else {
            i += 1;
            match c {
                '+' => Kind::Plus,
                '-' | '−' => Kind::Minus,
                '*' if chars.get(i) == Some(&'*') => {
                    i += 1;
                    Kind::Pow
                }
                '*' | '×' => Kind::Star,
                '/' | '÷' => Kind::Slash,
                '%' => Kind::Percent,
                '^' => Kind::Pow,
                '(' => Kind::LParen,
                ')' => Kind::RParen,
                ',' => Kind::Comma,
                _ => {
                    bail!(column, "unexpected character '{c}' at column {column}");
                }
            }
        };
        out.push(Token {
            kind,
            column,
            text: chars[start..i].iter().collect(),
        });
    }
    out.push(Token {
        kind: Kind::End,
        column: chars.len() + 1,
        text: String::new(),
    });
    Ok(out)
}

fn valid_names() -> String {
    let consts = CONSTANTS.iter().map(|(n, _)| *n);
    let funcs = FUNCTIONS.iter().map(|(n, _)| *n);
    consts.chain(funcs).collect::<Vec<_>>().join(", ")
}

/// A result must be a finite real number.
fn checked(v: f64, column: usize, what: &str) -> Result<f64, CalcError> {
    if v.is_nan() {
        bail!(column, "{what} at column {column} is not a real number");
    }
    if v.is_infinite() {
        bail!(column, "{what} at column {column} is infinite or too large");
    }
    Ok(v)
}

struct Parser {
    tokens: Vec<Token>,
    pos: usize,
    depth: usize,
}

impl Parser {
    fn peek(&self) -> &Token {
        &self.tokens[self.pos]
    }

    fn bump(&mut self) -> Token {
        let t = self.tokens[self.pos].clone();
        if t.kind != Kind::End {
            self.pos += 1;
        }
        t
    }

    fn unexpected<T>(&self, expected: &str) -> Result<T, CalcError> {
        let t = self.peek();
        let found = match t.kind {
            Kind::End => "end of expression".to_string(),
            _ => format!("'{}'", t.text),
        };
        bail!(
            t.column,
            "unexpected {found} at column {}; expected {expected}",
            t.column
        )
    }

    fn enter(&mut self) -> Result<(), CalcError> {
        self.depth += 1;
        if self.depth > MAX_DEPTH {
            let column = self.peek().column;
            bail!(column, "expression nests too deeply at column {column}");
        }
        Ok(())
    }

    /// expr := term (('+' | '-') term)*
    fn expr(&mut self) -> Result<f64, CalcError> {
        let mut v = self.term()?;
        loop {
            let op = self.peek().clone();
            let r = match op.kind {
                Kind::Plus | Kind::Minus => {
                    self.bump();
                    self.term()?
                }
                _ => return Ok(v),
            };
            v = if op.kind == Kind::Plus { v + r } else { v - r };
            v = checked(v, op.column, &format!("the '{}'", op.text))?;
        }
    }

    /// term := unary (('*' | '/' | '%') unary)*
    fn term(&mut self) -> Result<f64, CalcError> {
        let mut v = self.unary()?;
        loop {
            let op = self.peek().clone();
            if !matches!(op.kind, Kind::Star | Kind::Slash | Kind::Percent) {
                return Ok(v);
            }
            self.bump();
            let r = self.unary()?;
            if op.kind != Kind::Star && r == 0.0 {
                let what = if op.kind == Kind::Slash {
                    "division"
                } else {
                    "remainder"
                };
                bail!(op.column, "{what} by zero at column {}", op.column);
            }
            v = match op.kind {
                Kind::Star => v * r,
                Kind::Slash => v / r,
                _ => v % r,
            };
            v = checked(v, op.column, &format!("the '{}'", op.text))?;
        }
    }

    /// unary := ('+' | '-') unary | power. `-2^2` is -4.
    fn unary(&mut self) -> Result<f64, CalcError> {
        match self.peek().kind {
            Kind::Plus | Kind::Minus => {
                let neg = self.bump().kind == Kind::Minus;
                self.enter()?;
                let v = self.unary()?;
                self.depth -= 1;
                Ok(if neg { -v } else { v })
            }
            _ => self.power(),
        }
    }

    /// power := primary (('^' | '**') unary)?, so `2^3^2` is 2^(3^2).
    fn power(&mut self) -> Result<f64, CalcError> {
        let base = self.primary()?;
        if self.peek().kind != Kind::Pow {
            return Ok(base);
        }
        let op = self.bump();
        self.enter()?;
        let exp = self.unary()?;
        self.depth -= 1;
        checked(base.powf(exp), op.column, &format!("the '{}'", op.text))
    }

    /// primary := number | '(' expr ')' | constant | function '(' args ')'
    fn primary(&mut self) -> Result<f64, CalcError> {
        let t = self.peek().clone();
        match t.kind {
            Kind::Num(v) => {
                self.bump();
                Ok(v)
            }
            Kind::LParen => {
                self.bump();
                self.enter()?;
                let v = self.expr()?;
                self.depth -= 1;
                self.close(&t)?;
                Ok(v)
            }
            Kind::Ident(name) => {
                self.bump();
                self.name(&name, t.column)
            }
            _ => self.unexpected("a number, a name or '('"),
        }
    }

    /// Consumes the ')' matching `open`.
    fn close(&mut self, open: &Token) -> Result<(), CalcError> {
        match self.peek().kind {
            Kind::RParen => {
                self.bump();
                Ok(())
            }
            Kind::End => {
                let column = self.peek().column;
                bail!(
                    column,
                    "missing ')' at column {column} to close the '(' at column {}",
                    open.column
                )
            }
            _ => self.unexpected("an operator or ')'"),
        }
    }

    fn name(&mut self, name: &str, column: usize) -> Result<f64, CalcError> {
        let is_call = self.peek().kind == Kind::LParen;
        if let Some((_, v)) = CONSTANTS.iter().find(|(n, _)| *n == name) {
            if is_call {
                bail!(
                    column,
                    "'{name}' at column {column} is a constant, not a function"
                );
            }
            return Ok(*v);
        }
        let Some((_, arity)) = FUNCTIONS.iter().find(|(n, _)| *n == name) else {
            bail!(
                column,
                "unknown name '{name}' at column {column}; valid names are: {}",
                valid_names()
            );
        };
        if !is_call {
            bail!(
                column,
                "'{name}' at column {column} is a function; call it like {name}(x)"
            );
        }
        let open = self.bump();
        self.enter()?;
        let mut args = Vec::new();
        if self.peek().kind != Kind::RParen {
            loop {
                args.push(self.expr()?);
                if self.peek().kind != Kind::Comma {
                    break;
                }
                self.bump();
            }
        }
        self.depth -= 1;
        self.close(&open)?;
        match *arity {
            Arity::Exactly(n) if args.len() != n => {
                let s = if n == 1 { "" } else { "s" };
                bail!(
                    column,
                    "{name} at column {column} takes {n} argument{s}, got {}",
                    args.len()
                );
            }
            Arity::AtLeastOne if args.is_empty() => {
                bail!(
                    column,
                    "{name} at column {column} needs at least one argument"
                );
            }
            _ => {}
        }
        checked(apply(name, &args), column, &format!("the result of {name}"))
    }
}

/// Evaluates an arithmetic expression such as `2 * (3 + 4)`.
pub fn evaluate(expression: &str) -> Result<f64, CalcError> {
    let len = expression.chars().count();
    if len > MAX_LEN {
        bail!(
            1,
            "the expression is {len} characters long; the most is {MAX_LEN}"
        );
    }
    let tokens = tokenize(expression)?;
    let mut parser = Parser {
        tokens,
        pos: 0,
        depth: 0,
    };
    let v = parser.expr()?;
    if parser.peek().kind != Kind::End {
        return parser.unexpected("an operator or the end of the expression");
    }
    Ok(v)
}

/// Integral values under 1e15 print without a fraction; very large or small
/// ones in exponent form; the rest in the shortest form that reads back.
pub fn format_number(x: f64) -> String {
    let a = x.abs();
    if x == 0.0 {
        "0".to_string()
    } else if x.fract() == 0.0 && a < 1e15 {
        format!("{}", x as i64)
    } else if !(1e-6..1e15).contains(&a) {
        format!("{x:e}")
    } else {
        format!("{x}")
    }
}

/// The `calculator` tool.
#[derive(Debug, Clone)]
pub struct CalculatorTool {
    spec: ToolSpec,
}

impl CalculatorTool {
    pub fn new() -> Self {
        let spec = ToolSpec {
            name: "calculator".into(),
            description: "Evaluates an arithmetic expression exactly as written and returns the number. \
                Supports + - * / % ^ (or **), parentheses, pi, e and the functions sqrt abs ln log10 log2 \
                exp sin cos tan asin acos atan atan2 floor ceil round min max pow (angles in radians)."
                .into(),
            parameters: json!({
                "type": "object",
                "properties": {
                    "expression": {
                        "type": "string",
                        "description": "The expression to evaluate, e.g. `sqrt(2) * (3 + 4) ^ 2`.",
                        "examples": ["2 * (3 + 4)"]
                    }
                },
                "required": ["expression"],
                "additionalProperties": false
            }),
        };
        CalculatorTool { spec }
    }
}

impl Default for CalculatorTool {
    fn default() -> Self {
        Self::new()
    }
}

impl Tool for CalculatorTool {
    fn spec(&self) -> &ToolSpec {
        &self.spec
    }

    fn call<'a>(
        &'a self,
        args: serde_json::Value,
        _ctx: &'a ToolContext,
    ) -> BoxFuture<'a, Result<String, ToolError>> {
        Box::pin(async move {
            let expression = required_str(&args, "expression")?;
            evaluate(expression)
                .map(format_number)
                .map_err(|e| ToolError::Failed(format!("{e}. Fix the expression and try again.")))
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn eval(s: &str) -> f64 {
        evaluate(s).unwrap_or_else(|e| panic!("{s}: {e}"))
    }

    fn fails(s: &str) -> String {
        match evaluate(s) {
            Ok(v) => panic!("{s} gave {v}, expected an error"),
            Err(e) => e.to_string(),
        }
    }

    #[test]
    fn precedence_and_associativity() {
        assert_eq!(eval("2 * (3 + 4)"), 14.0);
        assert_eq!(eval("2 + 3 * 4"), 14.0);
        assert_eq!(eval("10 - 4 - 3"), 3.0);
        assert_eq!(eval("100 / 10 / 5"), 2.0);
        assert_eq!(eval("2 ^ 3 ^ 2"), 512.0);
        assert_eq!(eval("2 ** 10"), 1024.0);
        assert_eq!(eval("-2 ^ 2"), -4.0);
        assert_eq!(eval("2 ^ -1"), 0.5);
        assert_eq!(eval("--3"), 3.0);
        assert_eq!(eval("+4 - -2"), 6.0);
        assert_eq!(eval("7 % 3"), 1.0);
        assert_eq!(eval("2 * 3 % 4"), 2.0);
        assert_eq!(eval(".5 + 1e3"), 1000.5);
        assert_eq!(eval("2.5E-1"), 0.25);
        assert_eq!(eval("((1))"), 1.0);
    }

    #[test]
    fn functions_and_constants() {
        assert_eq!(eval("sqrt(16)"), 4.0);
        assert_eq!(eval("abs(-3)"), 3.0);
        assert_eq!(eval("ln(e)"), 1.0);
        assert_eq!(eval("log10(1000)"), 3.0);
        assert_eq!(eval("log2(8)"), 3.0);
        assert_eq!(eval("exp(0)"), 1.0);
        assert_eq!(eval("cos(pi)"), -1.0);
        assert_eq!(eval("sin(0) + tan(0) + asin(0) + atan(0)"), 0.0);
        assert_eq!(eval("acos(1)"), 0.0);
        assert_eq!(eval("floor(-1.5)"), -2.0);
        assert_eq!(eval("ceil(1.2)"), 2.0);
        assert_eq!(eval("round(2.5)"), 3.0);
        assert_eq!(eval("min(4, 2, 8)"), 2.0);
        assert_eq!(eval("max(1, 5, 3)"), 5.0);
        assert_eq!(eval("max(7)"), 7.0);
        assert_eq!(eval("pow(2, 8)"), 256.0);
        assert_eq!(eval("PI"), std::f64::consts::PI);
        assert_eq!(eval("2 * e"), 2.0 * std::f64::consts::E);
        assert!((eval("atan2(1, 1)") - std::f64::consts::FRAC_PI_4).abs() < 1e-12);
    }

    #[test]
    fn errors_say_where() {
        assert!(fails("(1 + 2))").contains("unexpected ')' at column 8"));
        assert!(fails("1 +").contains("unexpected end of expression at column 4"));
        assert!(fails("1 / 0").contains("division by zero at column 3"));
        assert!(fails("5 % (2 - 2)").contains("remainder by zero at column 3"));
        assert!(fails("2 $ 3").contains("unexpected character '$' at column 3"));
        assert!(fails("2 3").contains("unexpected '3' at column 3"));
        assert!(fails("(1 + 2").contains("missing ')' at column 7"));
        let unknown = fails("1 + foo(2)");
        assert!(
            unknown.contains("unknown name 'foo' at column 5"),
            "{unknown}"
        );
        assert!(
            unknown.contains("sqrt") && unknown.contains("pi"),
            "{unknown}"
        );
        assert!(fails("sqrt(-1)").contains("not a real number"));
        assert!(fails("pow(2)").contains("takes 2 arguments, got 1"));
        assert!(fails("min()").contains("at least one argument"));
        assert!(fails("sqrt 4").contains("is a function"));
        assert!(fails("pi(2)").contains("is a constant"));
        assert!(fails("10 ^ 400").contains("too large"));
        assert!(fails("1.2.3").contains("malformed number '1.2.3' at column 1"));
        assert!(fails("2e").contains("unexpected 'e' at column 2"));
        assert!(fails("").contains("unexpected end of expression at column 1"));
        assert!(fails(&"(".repeat(5000)).contains("nests too deeply"));
    }

    #[test]
    fn formats_numbers() {
        assert_eq!(format_number(14.0), "14");
        assert_eq!(format_number(-0.0), "0");
        assert_eq!(format_number(-3.0), "-3");
        assert_eq!(format_number(0.5), "0.5");
        assert_eq!(format_number(0.1 + 0.2), "0.30000000000000004");
        assert_eq!(format_number(1e20), "1e20");
        assert_eq!(format_number(1.5e-9), "1.5e-9");
        assert_eq!(format_number(999_999_999_999_999.0), "999999999999999");
    }

    #[tokio::test]
    async fn the_tool_answers_and_reports_errors() {
        let ctx = ToolContext {
            root: std::env::temp_dir(),
            cancel: Default::default(),
            output_cap: 1024,
            sandbox: Default::default(),
        };
        let tool = CalculatorTool::new();
        let ok = tool.call(json!({"expression": "2 * (3 + 4)"}), &ctx).await;
        assert_eq!(ok.unwrap(), "14");
        let bad = tool.call(json!({"expression": "2 * )"}), &ctx).await;
        assert!(matches!(bad, Err(ToolError::Failed(m)) if m.contains("column 5")));
    }

    proptest! {
        #[test]
        fn matches_integer_arithmetic(a in -1000i64..1000, b in -1000i64..1000, c in -1000i64..1000) {
            let got = evaluate(&format!("{a} + {b} * {c}")).unwrap();
            prop_assert_eq!(got, (a + b * c) as f64);
            let got = evaluate(&format!("{a} - {b} - {c}")).unwrap();
            prop_assert_eq!(got, (a - b - c) as f64);
        }
    }
}
