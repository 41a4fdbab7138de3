//! The `calculator` tool: arithmetic over `f64`. `evalexpr` parses the
//! expression into an operator tree (its tokenizer and precedence rules
//! replace our hand-written parser); this file walks that tree itself, so
//! that only arithmetic is evaluated (no assignments, strings, booleans or
//! comparisons, which evalexpr also knows), every number is a float (`7 / 2`
//! is 3.5, where evalexpr's own evaluator divides integers), `^` groups to
//! the right (`2^3^2` is 512; evalexpr groups it to the left), and errors
//! name the operation and say what to do. No shell and no `eval`: only
//! numbers, operators, a fixed set of functions and the constants `pi` and
//! `e`. Input length and nesting depth are bounded; results must be finite.

use evalexpr::{DefaultNumericTypes, EvalexprError, Node, Operator, Value};
use futures::future::BoxFuture;
use serde_json::json;

use super::required_str;
use crate::tools::{Tool, ToolContext, ToolError};
use crate::types::ToolSpec;

/// Longest expression accepted, in characters.
const MAX_LEN: usize = 10_000;
/// Deepest nesting of parentheses, signs, powers and calls accepted.
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

/// Why an expression could not be evaluated.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[error("{0}")]
pub struct CalcError(pub String);

/// Returns a `CalcError` with a formatted message.
macro_rules! bail {
    ($($fmt:tt)+) => {
        return Err(CalcError(format!($($fmt)+)))
    };
}

type Tree = Node<DefaultNumericTypes>;

fn valid_names() -> String {
    let consts = CONSTANTS.iter().map(|(n, _)| *n);
    let funcs = FUNCTIONS.iter().map(|(n, _)| *n);
    consts.chain(funcs).collect::<Vec<_>>().join(", ")
}

/// A result must be a finite real number.
fn checked(v: f64, what: &str) -> Result<f64, CalcError> {
    if v.is_nan() {
        bail!("{what} is not a real number");
    }
    if v.is_infinite() {
        bail!("{what} is infinite or too large");
    }
    Ok(v)
}

/// Evaluates an arithmetic expression such as `2 * (3 + 4)`.
pub fn evaluate(expression: &str) -> Result<f64, CalcError> {
    let len = expression.chars().count();
    if len > MAX_LEN {
        bail!("the expression is {len} characters long; the most is {MAX_LEN}");
    }
    if expression.trim().is_empty() {
        bail!("the expression is empty");
    }
    if nesting(expression) > MAX_DEPTH {
        bail!("the expression nests too deeply (more than {MAX_DEPTH} levels)");
    }
    let tree =
        evalexpr::build_operator_tree::<DefaultNumericTypes>(&spelled_for_evalexpr(expression))
            .map_err(|e| match e {
                EvalexprError::AppendedToLeafNode => CalcError(
                    "cannot read the expression: two values follow each other without an operator \
             between them"
                        .into(),
                ),
                e => CalcError(format!("cannot read the expression: {e}")),
            })?;
    eval(&tree, 0)
}

/// The deepest nesting of parentheses and chained signs (`--(-(1))`), which
/// evalexpr's parser (and this file's walk) descends recursively.
fn nesting(expression: &str) -> usize {
    let (mut deepest, mut parens, mut signs) = (0, 0usize, 0);
    for c in expression.chars().filter(|c| !c.is_whitespace()) {
        match c {
            '(' => parens += 1,
            ')' => parens = parens.saturating_sub(1),
            '-' | '+' | '−' => signs += 1,
            _ => signs = 0,
        }
        deepest = deepest.max(parens + signs);
    }
    deepest
}

/// Our spellings evalexpr does not know: `**` for `^`, the typographic
/// signs, names in any case, and a unary `+` (dropped: evalexpr would read
/// `+4` as a `+` missing its left operand, like `4 +`). A `+` is unary when
/// it starts the expression or follows `(`, `,` or another operator.
fn spelled_for_evalexpr(expression: &str) -> String {
    let mut out = String::with_capacity(expression.len());
    let mut previous = None;
    for c in expression.replace("**", "^").chars() {
        let c = match c {
            '−' => '-',
            '×' => '*',
            '÷' => '/',
            c => c,
        };
        if c == '+' && previous.is_none_or(|p| "(,+-*/%^".contains(p)) {
            continue;
        }
        if !c.is_whitespace() {
            previous = Some(c);
        }
        out.extend(c.to_lowercase());
    }
    out
}

fn eval(node: &Tree, depth: usize) -> Result<f64, CalcError> {
    // The pre-scan bounds parentheses and signs; this is the backstop.
    if depth > 4 * MAX_DEPTH {
        bail!("the expression nests too deeply (more than {MAX_DEPTH} levels)");
    }
    match node.operator() {
        Operator::RootNode => match node.children() {
            [] => bail!("empty parentheses: put an expression between them"),
            [only] => eval(only, depth + 1),
            _ => bail!("unexpected input after the expression"),
        },
        Operator::Add | Operator::Sub | Operator::Mul | Operator::Div | Operator::Mod => {
            arithmetic(node, depth)
        }
        Operator::Neg => match node.children() {
            [operand] => Ok(-eval(operand, depth + 1)?),
            _ => bail!("'-' needs a number after it"),
        },
        Operator::Exp => power(node, depth),
        Operator::Const { value } => match value {
            Value::Int(i) => Ok(*i as f64),
            Value::Float(f) => checked(*f, &format!("the number {f}")),
            other => bail!("{other} is not a number; the calculator takes numbers only"),
        },
        Operator::VariableIdentifierRead { identifier } => constant(identifier),
        Operator::FunctionIdentifier { identifier } => match node.children() {
            [argument] => call(identifier, argument, depth),
            _ => bail!("'{identifier}' is a function; call it like {identifier}(x)"),
        },
        Operator::Tuple => {
            bail!("',' only separates the arguments of a function, as in max(1, 2)")
        }
        other => bail!(
            "'{}' is not supported: use numbers, + - * / % ^ (or **), parentheses and the names {}",
            other.to_string().trim(),
            valid_names()
        ),
    }
}

fn is_arithmetic(op: &Operator<DefaultNumericTypes>) -> bool {
    matches!(
        op,
        Operator::Add | Operator::Sub | Operator::Mul | Operator::Div | Operator::Mod
    )
}

/// `+ - * / %`. evalexpr nests a chain such as `1 + 2 - 3 + ...` to the
/// left; it is walked in a loop, so a long sum costs no stack.
fn arithmetic(node: &Tree, depth: usize) -> Result<f64, CalcError> {
    let mut chain = Vec::new();
    let mut left = node;
    while is_arithmetic(left.operator()) {
        let [l, r] = left.children() else {
            bail!(
                "'{}' needs a number on each side",
                left.operator().to_string().trim()
            );
        };
        chain.push((left.operator(), r));
        left = l;
    }
    let mut value = eval(left, depth + 1)?;
    for (op, right) in chain.into_iter().rev() {
        let r = eval(right, depth + 1)?;
        let (v, symbol) = match op {
            Operator::Add => (value + r, "+"),
            Operator::Sub => (value - r, "-"),
            Operator::Mul => (value * r, "*"),
            Operator::Div if r == 0.0 => bail!("division by zero"),
            Operator::Mod if r == 0.0 => bail!("remainder by zero"),
            Operator::Div => (value / r, "/"),
            _ => (value % r, "%"),
        };
        value = checked(v, &format!("the result of '{symbol}'"))?;
    }
    Ok(value)
}

/// `a ^ b ^ c` as `a ^ (b ^ c)`. evalexpr nests a chain of `^` to the left;
/// a parenthesised `(a ^ b)` sits under its own root node, so only a bare
/// left operand belongs to the chain.
fn power(node: &Tree, depth: usize) -> Result<f64, CalcError> {
    let mut operands = Vec::new();
    let mut left = node;
    while matches!(left.operator(), Operator::Exp) {
        let [base, exponent] = left.children() else {
            bail!("'^' needs a number on each side");
        };
        operands.push(exponent);
        left = base;
    }
    operands.push(left);
    // `operands` is right to left: fold from the rightmost exponent.
    let mut value = eval(operands[0], depth + 1)?;
    for base in &operands[1..] {
        value = checked(eval(base, depth + 1)?.powf(value), "the result of '^'")?;
    }
    Ok(value)
}

fn constant(name: &str) -> Result<f64, CalcError> {
    if let Some((_, v)) = CONSTANTS.iter().find(|(n, _)| *n == name) {
        return Ok(*v);
    }
    if FUNCTIONS.iter().any(|(n, _)| *n == name) {
        bail!("'{name}' is a function; call it like {name}(x)");
    }
    bail!("unknown name '{name}'; valid names are: {}", valid_names())
}

fn call(name: &str, argument: &Tree, depth: usize) -> Result<f64, CalcError> {
    if CONSTANTS.iter().any(|(n, _)| *n == name) {
        bail!("'{name}' is a constant, not a function");
    }
    let Some((_, arity)) = FUNCTIONS.iter().find(|(n, _)| *n == name) else {
        bail!("unknown name '{name}'; valid names are: {}", valid_names());
    };
    // evalexpr also reads `sqrt 4` as a call; ours need parentheses, which
    // evalexpr keeps as a root node.
    if !matches!(argument.operator(), Operator::RootNode) {
        bail!("'{name}' is a function; call it like {name}(x)");
    }
    let args: Vec<f64> = match argument.children() {
        [] => Vec::new(),
        [tuple] if matches!(tuple.operator(), Operator::Tuple) => tuple
            .children()
            .iter()
            .map(|a| eval(a, depth + 2))
            .collect::<Result<_, _>>()?,
        [single] => vec![eval(single, depth + 2)?],
        _ => bail!("unexpected input in the arguments of {name}"),
    };
    match *arity {
        Arity::Exactly(n) if args.len() != n => {
            let s = if n == 1 { "" } else { "s" };
            bail!("{name} takes {n} argument{s}, got {}", args.len());
        }
        Arity::AtLeastOne if args.is_empty() => {
            bail!("{name} needs at least one argument");
        }
        _ => {}
    }
    checked(apply(name, &args), &format!("the result of {name}"))
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
    fn spellings_and_semantics_evalexpr_does_not_have_by_itself() {
        // Float division and remainder, not integer ones.
        assert_eq!(eval("7 / 2"), 3.5);
        assert_eq!(eval("7.5 % 2"), 1.5);
        // `^` and `**` group to the right; parentheses still win.
        assert_eq!(eval("2 ** 3 ** 2"), 512.0);
        assert_eq!(eval("(2 ^ 3) ^ 2"), 64.0);
        assert_eq!(eval("2 ^ (3 ^ 2)"), 512.0);
        assert_eq!(eval("2 ^ 3 ^ 2 ^ 0"), 8.0);
        // Typographic signs and any case.
        assert_eq!(eval("6 × 7 − 2 ÷ 2"), 41.0);
        assert_eq!(eval("SQRT(16) + Pi - PI"), 4.0);
        assert_eq!(eval("1e3 + 2E-1"), 1000.2);
    }

    #[test]
    fn errors_say_what_is_wrong() {
        let fails_with = |s: &str, want: &str| {
            let err = fails(s);
            assert!(err.contains(want), "{s}: {err}");
        };
        fails_with("1 / 0", "division by zero");
        fails_with("1 / (2 - 2)", "division by zero");
        fails_with("5 % (2 - 2)", "remainder by zero");
        fails_with(
            "1 + foo(2)",
            "unknown name 'foo'; valid names are: pi, e, sqrt",
        );
        fails_with("x + 1", "unknown name 'x'");
        fails_with("sqrt(-1)", "the result of sqrt is not a real number");
        fails_with("pow(2)", "pow takes 2 arguments, got 1");
        fails_with("sqrt(1, 2)", "sqrt takes 1 argument, got 2");
        fails_with("min()", "min needs at least one argument");
        fails_with("sqrt 4", "'sqrt' is a function; call it like sqrt(x)");
        fails_with("sqrt + 1", "'sqrt' is a function");
        fails_with("pi(2)", "'pi' is a constant, not a function");
        fails_with("10 ^ 400", "too large");
        fails_with("1e308 * 10", "too large");
        fails_with("", "the expression is empty");
        fails_with("  ", "the expression is empty");
        fails_with("()", "empty parentheses");
        fails_with("1, 2", "',' only separates the arguments");
        fails_with("1 == 1", "'==' is not supported");
        fails_with("a = 2", "'=' is not supported");
        fails_with("true", "not a number");
        fails_with("\"text\"", "not a number");
        fails_with(&"x".repeat(10_001), "the most is 10000");
        fails_with("1 +", "'+' needs a number on each side");
        fails_with("* 2", "'*' needs a number on each side");
        fails_with("2 ^", "'^' needs a number on each side");
        fails_with("(1 + 2))", "unmatched closing parenthesis");
        fails_with("(1 + 2", "unmatched opening parenthesis");
        fails_with("2 3", "two values follow each other without an operator");
        fails_with("1.2.3", "unknown name '1.2.3'");
        fails_with("2e", "unknown name '2e'");
        let err = fails("2 $ 3");
        assert!(err.starts_with("cannot read the expression"), "{err}");
        fails_with(
            &format!("{}1{}", "(".repeat(300), ")".repeat(300)),
            "nests too deeply",
        );
        fails_with(&format!("{}1", "-".repeat(5000)), "nests too deeply");
        fails_with(&"(".repeat(5000), "nests too deeply");
        fails_with(&format!("{}1", "-(".repeat(2000)), "nests too deeply");
    }

    #[test]
    fn long_inputs_cost_no_stack() {
        // A long sum is a loop, not a nesting.
        assert_eq!(eval(&format!("1{}", " + 1".repeat(2400))), 2401.0);
        assert_eq!(eval(&format!("2{}", "^1".repeat(4000))), 2.0);
        assert_eq!(eval(&format!("1{}", "*-1".repeat(3000))), 1.0);
        // Whatever these give, they give it without overflowing the stack.
        for shape in ["2^-", "-2*", "sqrt(", "(-", "max(1,"] {
            let _ = evaluate(&format!("{}2", shape.repeat(9_000 / shape.len())));
        }
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
        let bad = tool.call(json!({"expression": "1 / 0"}), &ctx).await;
        assert!(
            matches!(&bad, Err(ToolError::Failed(m)) if m == "division by zero. Fix the expression and try again."),
            "{bad:?}"
        );
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
