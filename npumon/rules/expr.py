"""The rule expression language: a small, safe language compiled into Python closures.

One module on purpose (over 400 lines): tokenizer, parser and compiler of one small language, read
together; the functions a rule may call are listed at the end.

No user text ever reaches Python's eval, exec or compile: a tokenizer and a precedence-climbing parser
build a tree, and each node becomes a closure. Names are plain keys into a dict of facts (a dot is part
of the name, never attribute access), and only the functions listed below can be called.

Grammar (lowest precedence first):

    expr       := or
    or         := and ("or" and)*
    and        := not ("and" not)*
    not        := "not" not | comparison
    comparison := sum [("<" | "<=" | ">" | ">=" | "==" | "!=" | "in" | "not" "in") sum]   (no chaining)
    sum        := product (("+" | "-") product)*
    product    := unary (("*" | "/") unary)*
    unary      := "-" unary | primary
    primary    := NUMBER [UNIT] | STRING | "true" | "false" | NAME | NAME "(" args ")"
                  | "[" [expr ("," expr)*] "]" | "(" expr ")"

NUMBER may carry a duration unit: 30s, 5m, 1h, 1d (the value is in seconds). STRING is double-quoted
("\\"" and "\\\\" are the only escapes). NAME is `letters_digits` segments joined by dots:
`temperature_celsius`, `host.cpu_ratio`, `param.temperature_critical_celsius`. A fact whose name is not
a NAME (source names contain '-' and ':') is written `fact("source_up.npu-smi:usages")`.

Functions:
  window functions over the recorded history of one fact of the same subject; the first argument is
  a fact name, the second a duration:
    avg_over(x, 5m)  min_over(x, 5m)  max_over(x, 5m)
    increase(x, 1h)  last - first, a decrease is taken as a counter reset (as Prometheus does)
    rate(x, 10m)     increase per second
    delta(x, 1h)     last - first, no reset handling
    changes(x, 1h)   how many times the value changed (works for strings too)
  With a single sample in the window (e.g. `npumon check`), increase/delta/changes are 0 and rate is null.
  abs(x), min(a, b, ...), max(a, b, ...) (or min(list)/max(list)), count(list) (non-null items),
  len(list or string).

Null semantics (a value npu-smi did not report is null) -- three-valued logic, as in SQL:
  * arithmetic with a null operand is null; division by zero is null; arithmetic is on numbers only,
    anything else (strings, lists, true/false) gives null too;
  * a comparison or `in` with a null operand is null ("unknown"), never true or false;
  * `not null` is null; `false and null` is false, `true or null` is true, other and/or with null is null;
  * window functions ignore null samples; with no sample at all they are null;
  * min/max/abs with a null argument are null; count() skips nulls.
The engine fires a rule only when its expression is exactly true, and clears it only when the clear
condition is exactly true (by default: the expression is exactly false). So a missing value can
neither fire nor clear a rule; it keeps the current state.
"""

import operator
import re
from typing import Any, Callable, Dict, FrozenSet, List, Mapping, NamedTuple, Optional, Sequence, Tuple

Series = Tuple[Sequence[float], Sequence[Any]]  # (times, values), oldest first, no nulls

DURATION_UNITS = {"s": 1.0, "m": 60.0, "h": 3600.0, "d": 86400.0}
PARAM_PREFIX = "param."


class ExprError(ValueError):
    """A syntax or usage error; `position` is the 0-based character offset in the expression text."""

    def __init__(self, message: str, position: int):
        super().__init__("{} (column {})".format(message, position + 1))
        self.message = message
        self.position = position


def parse_duration(text: str) -> float:
    """'30s', '5m', '1h', '1d' or a plain number of seconds -> seconds. ValueError when malformed."""
    match = re.fullmatch(r"\s*(\d+(?:\.\d+)?)\s*([smhd]?)\s*", text)
    if not match:
        raise ValueError("expected a duration like 30s, 5m, 1h or 1d, got {!r}".format(text))
    return float(match.group(1)) * DURATION_UNITS.get(match.group(2), 1.0)


# --------------------------------------------------------------------------------------------- tokens

class Token(NamedTuple):
    kind: str  # num, str, name, op, end
    value: Any
    position: int


_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*(?:\.[A-Za-z_][A-Za-z0-9_]*)*")
_NUMBER = re.compile(r"(?:\d+(?:\.\d*)?|\.\d+)(?:[eE][+-]?\d+)?")
_OPERATORS = ("<=", ">=", "==", "!=", "<", ">", "+", "-", "*", "/", "(", ")", "[", "]", ",")
KEYWORDS = frozenset(("and", "or", "not", "in", "true", "false"))


def tokenize(text: str) -> List[Token]:
    tokens = []
    pos = 0
    while pos < len(text):
        char = text[pos]
        if char.isspace():
            pos += 1
            continue
        number = _NUMBER.match(text, pos)
        if number:
            value, pos = _read_number(text, number)
            tokens.append(Token("num", value, number.start()))
            continue
        name = _NAME.match(text, pos)
        if name:
            word = name.group()
            if any(part.startswith("__") for part in word.split(".")):
                raise ExprError("names starting with '__' are not allowed", pos)
            tokens.append(Token("op" if word in KEYWORDS else "name", word, pos))
            pos = name.end()
            continue
        if char == '"':
            value, end = _read_string(text, pos)
            tokens.append(Token("str", value, pos))
            pos = end
            continue
        for op in _OPERATORS:
            if text.startswith(op, pos):
                tokens.append(Token("op", op, pos))
                pos += len(op)
                break
        else:
            raise ExprError(_unexpected_char_message(char), pos)
    tokens.append(Token("end", None, len(text)))
    return tokens


def _read_number(text: str, match: "re.Match") -> Tuple[float, int]:
    """A number and its optional duration unit (the value is then in seconds); returns (value, end)."""
    literal = match.group()
    end = match.end()
    if len(literal) > 40:
        raise ExprError("number too long", match.start())
    value: float = float(literal) if any(c in literal for c in ".eE") else int(literal)
    suffix = re.match(r"[A-Za-z_][A-Za-z0-9_]*", text[end:])
    if suffix:
        unit = suffix.group()
        if unit not in DURATION_UNITS:
            raise ExprError("unknown unit {!r} after a number (durations use s, m, h or d)".format(unit), end)
        value = value * DURATION_UNITS[unit]
        end += len(unit)
    return value, end


def _read_string(text: str, start: int) -> Tuple[str, int]:
    chars = []
    pos = start + 1
    while pos < len(text):
        char = text[pos]
        if char == '"':
            return "".join(chars), pos + 1
        if char == "\\":
            following = text[pos + 1:pos + 2]
            if following not in ('"', "\\"):
                raise ExprError("unknown escape in string (only \\\" and \\\\ are allowed)", pos)
            chars.append(following)
            pos += 2
            continue
        chars.append(char)
        pos += 1
    raise ExprError("unterminated string", start)


def _unexpected_char_message(char: str) -> str:
    hints = {"'": "strings use double quotes", "=": "use == to compare", "!": "use not",
             "&": "use and", "|": "use or", ".": "a name cannot start with a dot"}
    message = "unexpected character {!r}".format(char)
    return message + ("; " + hints[char] if char in hints else "")


# --------------------------------------------------------------------------------------------- tree

class Node(NamedTuple):
    kind: str  # const, name, list, unary, binary, compare, and, or, not, call, window
    value: Any  # constant, name, operator or function name
    children: Tuple["Node", ...]
    position: int
    window: float = 0.0  # seconds, for kind == "window"


WINDOW_FUNCTIONS = ("avg_over", "min_over", "max_over", "increase", "rate", "delta", "changes")
# name -> (least, most) number of arguments; None = any number
SCALAR_FUNCTIONS = {"abs": (1, 1), "min": (1, None), "max": (1, None), "count": (1, 1), "len": (1, 1)}


class _Parser:
    def __init__(self, text: str):
        self.text = text
        self.tokens = tokenize(text)
        self.index = 0

    @property
    def current(self) -> Token:
        return self.tokens[self.index]

    def advance(self) -> Token:
        token = self.tokens[self.index]
        self.index += 1
        return token

    def at(self, *ops: str) -> bool:
        return self.current.kind == "op" and self.current.value in ops

    def expect(self, op: str, context: str) -> Token:
        if not self.at(op):
            raise ExprError("expected {!r} {}, found {}".format(op, context, _describe(self.current)),
                            self.current.position)
        return self.advance()

    def parse(self) -> Node:
        if self.current.kind == "end":
            raise ExprError("empty expression", 0)
        node = self.parse_or()
        if self.current.kind != "end":
            raise ExprError("unexpected {}".format(_describe(self.current)), self.current.position)
        return node

    def parse_or(self) -> Node:
        node = self.parse_and()
        while self.at("or"):
            token = self.advance()
            node = Node("or", "or", (node, self.parse_and()), token.position)
        return node

    def parse_and(self) -> Node:
        node = self.parse_not()
        while self.at("and"):
            token = self.advance()
            node = Node("and", "and", (node, self.parse_not()), token.position)
        return node

    def parse_not(self) -> Node:
        if self.at("not"):
            token = self.advance()
            return Node("not", "not", (self.parse_not(),), token.position)
        return self.parse_comparison()

    def parse_comparison(self) -> Node:
        left = self.parse_sum()
        op = self._comparison_operator()
        if op is None:
            return left
        token_position = self.current.position
        self.advance()
        if op == "not in":
            self.advance()
        right = self.parse_sum()
        if self._comparison_operator() is not None:
            raise ExprError("comparisons cannot be chained; combine them with and", self.current.position)
        return Node("compare", op, (left, right), token_position)

    def _comparison_operator(self) -> Optional[str]:
        if self.at("<", "<=", ">", ">=", "==", "!=", "in"):
            return self.current.value
        if self.at("not"):
            following = self.tokens[self.index + 1]
            if following.kind == "op" and following.value == "in":
                return "not in"
        return None

    def parse_sum(self) -> Node:
        node = self.parse_product()
        while self.at("+", "-"):
            token = self.advance()
            node = Node("binary", token.value, (node, self.parse_product()), token.position)
        return node

    def parse_product(self) -> Node:
        node = self.parse_unary()
        while self.at("*", "/"):
            token = self.advance()
            node = Node("binary", token.value, (node, self.parse_unary()), token.position)
        return node

    def parse_unary(self) -> Node:
        if self.at("-"):
            token = self.advance()
            return Node("unary", "-", (self.parse_unary(),), token.position)
        return self.parse_primary()

    def parse_primary(self) -> Node:
        token = self.current
        if token.kind in ("num", "str"):
            self.advance()
            return Node("const", token.value, (), token.position)
        if self.at("true", "false"):
            self.advance()
            return Node("const", token.value == "true", (), token.position)
        if token.kind == "name":
            self.advance()
            if self.at("("):
                return self.parse_call(token)
            return Node("name", token.value, (), token.position)
        if self.at("("):
            self.advance()
            node = self.parse_or()
            self.expect(")", "to close '('")
            return node
        if self.at("["):
            self.advance()
            items = self.parse_arguments("]")
            return Node("list", None, tuple(items), token.position)
        if token.kind == "end":
            raise ExprError("unexpected end of expression", token.position)
        raise ExprError("unexpected {}".format(_describe(token)), token.position)

    def parse_arguments(self, closing: str) -> List[Node]:
        items: List[Node] = []
        if self.at(closing):
            self.advance()
            return items
        while True:
            items.append(self.parse_or())
            if self.at(","):
                self.advance()
                continue
            self.expect(closing, "after an argument")
            return items

    def parse_call(self, name_token: Token) -> Node:
        function = name_token.value
        self.advance()  # "("
        args = self.parse_arguments(")")
        position = name_token.position
        if function == "fact":
            if len(args) != 1 or args[0].kind != "const" or not isinstance(args[0].value, str):
                raise ExprError("fact() takes one string: a fact name", position)
            return Node("name", args[0].value, (), position)
        if function in WINDOW_FUNCTIONS:
            return _window_node(function, args, position)
        if function not in SCALAR_FUNCTIONS:
            known = ", ".join(sorted(WINDOW_FUNCTIONS + tuple(SCALAR_FUNCTIONS) + ("fact",)))
            raise ExprError("unknown function {!r} (known: {})".format(function, known), position)
        least, most = SCALAR_FUNCTIONS[function]
        if len(args) < least or (most is not None and len(args) > most):
            expected = str(least) if least == most else "at least {}".format(least)
            raise ExprError("{}() takes {} argument(s), got {}".format(function, expected, len(args)), position)
        return Node("call", function, tuple(args), position)


def _window_node(function: str, args: List[Node], position: int) -> Node:
    if len(args) != 2:
        raise ExprError("{}() takes a fact name and a duration, e.g. {}(x, 5m)".format(function, function),
                        position)
    subject, window = args
    if subject.kind != "name" or subject.value.startswith(PARAM_PREFIX):
        raise ExprError("the first argument of {}() must be a fact name".format(function), subject.position)
    if window.kind != "const" or isinstance(window.value, (str, bool)) or window.value <= 0:
        raise ExprError("the second argument of {}() must be a positive duration like 5m".format(function),
                        window.position)
    return Node("window", function, (subject,), position, float(window.value))


def _describe(token: Token) -> str:
    if token.kind == "end":
        return "end of expression"
    if token.kind == "str":
        return "string {!r}".format(token.value)
    return repr(str(token.value))


# --------------------------------------------------------------------------------------------- window functions

def window_avg(times: Sequence[float], values: Sequence[Any]) -> Optional[float]:
    if not values:
        return None
    try:
        return sum(values) / len(values)
    except TypeError:
        return None


def window_min(times: Sequence[float], values: Sequence[Any]) -> Any:
    try:
        return min(values) if values else None
    except TypeError:
        return None


def window_max(times: Sequence[float], values: Sequence[Any]) -> Any:
    try:
        return max(values) if values else None
    except TypeError:
        return None


def window_increase(times: Sequence[float], values: Sequence[Any]) -> Optional[float]:
    """Sum of the rises; a drop means the counter was reset (or cleared) and restarted from zero."""
    if not values:
        return None
    try:
        if all(map(operator.le, values[:-1], values[1:])):  # the common case, in C
            return values[-1] - values[0]
        total = 0
        previous = values[0]
        for value in values[1:]:
            total += value - previous if value >= previous else value
            previous = value
        return total
    except TypeError:
        return None


def window_rate(times: Sequence[float], values: Sequence[Any]) -> Optional[float]:
    if len(values) < 2 or times[-1] <= times[0]:
        return None
    increase = window_increase(times, values)
    return None if increase is None else increase / (times[-1] - times[0])


def window_delta(times: Sequence[float], values: Sequence[Any]) -> Optional[float]:
    if not values:
        return None
    try:
        return values[-1] - values[0]
    except TypeError:
        return None


def window_changes(times: Sequence[float], values: Sequence[Any]) -> Optional[int]:
    if not values:
        return None
    return sum(map(operator.ne, values[:-1], values[1:]))


_WINDOW_IMPLEMENTATIONS = {
    "avg_over": window_avg, "min_over": window_min, "max_over": window_max, "increase": window_increase,
    "rate": window_rate, "delta": window_delta, "changes": window_changes,
}


# --------------------------------------------------------------------------------------------- evaluation

class EvalContext:
    """What an expression sees: one subject's facts, the rule parameters and that subject's history.

    `series(name, seconds)` returns the (times, values) of a fact over the last `seconds`; without a
    history the window holds just the current value, which is what `npumon check` sees too.
    """

    __slots__ = ("facts", "params", "series")

    def __init__(self, facts: Mapping[str, Any], params: Optional[Mapping[str, Any]] = None,
                 series: Optional[Callable[[str, float], Series]] = None):
        self.facts = facts
        self.params = params if params is not None else {}
        self.series = series if series is not None else self._current_value_only

    def _current_value_only(self, name: str, seconds: float) -> Series:
        value = self.facts.get(name)
        return ((), ()) if value is None else ((0.0,), (value,))


Evaluator = Callable[[EvalContext], Any]


def _compile(node: Node) -> Evaluator:
    compiler = _COMPILERS[node.kind]
    evaluator = compiler(node)
    if node.kind not in ("const", "name", "window") and _is_constant(node):
        # Fold constant sub-expressions (e.g. `5m * 2`, list literals) once, at compile time.
        value = evaluator(EvalContext({}))
        return lambda ctx: value
    return evaluator


def _is_constant(node: Node) -> bool:
    if node.kind == "const":
        return True
    if node.kind in ("name", "window"):
        return False
    return all(_is_constant(child) for child in node.children)


def _compile_const(node: Node) -> Evaluator:
    value = node.value
    return lambda ctx: value


def _compile_name(node: Node) -> Evaluator:
    name = node.value
    if name.startswith(PARAM_PREFIX):
        key = name[len(PARAM_PREFIX):]
        return lambda ctx: ctx.params.get(key)
    return lambda ctx: ctx.facts.get(name)


def _compile_list(node: Node) -> Evaluator:
    items = [_compile(child) for child in node.children]
    return lambda ctx: [item(ctx) for item in items]


_NUMBER_TYPES = (int, float)  # exact types: true/false are not numbers here


def _compile_unary(node: Node) -> Evaluator:
    operand = _compile(node.children[0])

    def negate(ctx: EvalContext) -> Any:
        value = operand(ctx)
        return -value if type(value) in _NUMBER_TYPES else None
    return negate


def _numeric(apply: Callable[[Any, Any], Any]) -> Callable[[Any, Any], Any]:
    """Arithmetic on numbers only: no string or list repetition (`"a" * 10**9`), no concatenation."""
    def arithmetic(a: Any, b: Any) -> Any:
        if type(a) not in _NUMBER_TYPES or type(b) not in _NUMBER_TYPES:
            return None
        return apply(a, b)
    return arithmetic


def _divide(a: Any, b: Any) -> Any:
    return None if b == 0 else a / b


_ARITHMETIC = {"+": _numeric(operator.add), "-": _numeric(operator.sub), "*": _numeric(operator.mul),
               "/": _numeric(_divide)}
_COMPARE = {"<": operator.lt, "<=": operator.le, ">": operator.gt, ">=": operator.ge,
            "==": operator.eq, "!=": operator.ne,
            "in": lambda a, b: a in b, "not in": lambda a, b: a not in b}


def _leaf(node: Node) -> Tuple[str, Any]:
    """("fact", name), ("param", key) or ("const", value) for a leaf a comparison can read inline, else
    ("", None). A null constant is not inlined (the general path answers null for it)."""
    if node.kind == "name":
        if node.value.startswith(PARAM_PREFIX):
            return "param", node.value[len(PARAM_PREFIX):]
        return "fact", node.value
    if node.kind == "const" and node.value is not None:
        return "const", node.value
    return "", None


def _compile_binary(node: Node) -> Evaluator:
    """Arithmetic and comparisons share one shape: null in, null out; a type mismatch is null too.

    Most rules compare a fact with a constant or a parameter (`health == "Alarm"`, `temperature_celsius >=
    param.x`): those read both sides inline rather than through a closure each, the same values in the
    same order, which is a good part of an evaluation of every rule on 64 chips."""
    left, right = (_compile(child) for child in node.children)
    apply = _ARITHMETIC[node.value] if node.kind == "binary" else _COMPARE[node.value]
    left_kind, name = _leaf(node.children[0])
    right_kind, other = _leaf(node.children[1])

    if left_kind == "fact" and right_kind in ("const", "param"):
        constant = right_kind == "const"

        def fact_and_value(ctx: EvalContext) -> Any:
            a = ctx.facts.get(name)
            b = other if constant else ctx.params.get(other)
            if a is None or b is None:
                return None
            try:
                return apply(a, b)
            except (TypeError, OverflowError):
                return None
        return fact_and_value

    def binary(ctx: EvalContext) -> Any:
        a = left(ctx)
        if a is None:
            return None
        b = right(ctx)
        if b is None:
            return None
        try:
            return apply(a, b)
        except (TypeError, OverflowError):
            return None
    return binary


def _truth(value: Any) -> Optional[bool]:
    return None if value is None else bool(value)


def _compile_not(node: Node) -> Evaluator:
    operand = _compile(node.children[0])

    def negation(ctx: EvalContext) -> Optional[bool]:
        value = operand(ctx)
        return None if value is None else not value
    return negation


def _compile_and(node: Node) -> Evaluator:
    left, right = (_compile(child) for child in node.children)

    def conjunction(ctx: EvalContext) -> Optional[bool]:
        a = _truth(left(ctx))
        if a is False:
            return False  # short-circuit: the right side (maybe a costly window) is not evaluated
        b = _truth(right(ctx))
        if b is False:
            return False
        return None if a is None or b is None else True
    return conjunction


def _compile_or(node: Node) -> Evaluator:
    left, right = (_compile(child) for child in node.children)

    def disjunction(ctx: EvalContext) -> Optional[bool]:
        a = _truth(left(ctx))
        if a is True:
            return True
        b = _truth(right(ctx))
        if b is True:
            return True
        return None if a is None or b is None else False
    return disjunction


def _call_abs(args: List[Any]) -> Any:
    return abs(args[0])


def _extreme(pick: Callable[..., Any]) -> Callable[[List[Any]], Any]:
    """min/max of the arguments, or of one list argument (whose nulls are skipped)."""
    def extreme(args: List[Any]) -> Any:
        if len(args) == 1 and isinstance(args[0], list):
            items = [item for item in args[0] if item is not None]
            return pick(items) if items else None
        return pick(args)
    return extreme


def _call_count(args: List[Any]) -> Any:
    return sum(1 for item in args[0] if item is not None) if isinstance(args[0], list) else None


def _call_len(args: List[Any]) -> Any:
    return len(args[0]) if isinstance(args[0], (list, str)) else None


_SCALAR_IMPLEMENTATIONS = {"abs": _call_abs, "min": _extreme(min), "max": _extreme(max),
                           "count": _call_count, "len": _call_len}


def _compile_call(node: Node) -> Evaluator:
    args = [_compile(child) for child in node.children]
    implementation = _SCALAR_IMPLEMENTATIONS[node.value]
    list_argument = len(args) == 1 and node.value in ("min", "max", "count")

    def call(ctx: EvalContext) -> Any:
        values = [arg(ctx) for arg in args]
        if not list_argument and any(value is None for value in values):
            return None
        if list_argument and values[0] is None:
            return None
        try:
            return implementation(values)
        except (TypeError, ValueError):
            return None
    return call


def _compile_window(node: Node) -> Evaluator:
    name = node.children[0].value
    seconds = node.window
    implementation = _WINDOW_IMPLEMENTATIONS[node.value]

    def window(ctx: EvalContext) -> Any:
        times, values = ctx.series(name, seconds)
        return implementation(times, values)
    return window


_COMPILERS: Dict[str, Callable[[Node], Evaluator]] = {
    "const": _compile_const, "name": _compile_name, "list": _compile_list, "unary": _compile_unary,
    "binary": _compile_binary, "compare": _compile_binary, "not": _compile_not, "and": _compile_and,
    "or": _compile_or, "call": _compile_call, "window": _compile_window,
}

# Node kinds whose value is a condition (true/false/null) rather than a number, string or list.
_CONDITION_KINDS = ("compare", "and", "or", "not")


class Expression:
    """A compiled expression. `names`: every fact and `param.` name it reads; `windows`: fact name ->
    longest window in seconds over it; `window_seconds`: the longest window of all (0 without any)."""

    __slots__ = ("text", "names", "windows", "window_seconds", "is_condition", "_evaluate")

    def __init__(self, text: str, tree: Node):
        self.text = text
        names: List[str] = []
        windows: Dict[str, float] = {}
        _collect(tree, names, windows)
        self.names: FrozenSet[str] = frozenset(names)
        self.windows: Dict[str, float] = windows
        self.window_seconds: float = max(windows.values(), default=0.0)
        self.is_condition = tree.kind in _CONDITION_KINDS or (
            tree.kind == "const" and isinstance(tree.value, bool))
        self._evaluate = _compile(tree)

    def evaluate(self, ctx: EvalContext) -> Any:
        return self._evaluate(ctx)

    def __repr__(self) -> str:
        return "Expression({!r})".format(self.text)


def _collect(node: Node, names: List[str], windows: Dict[str, float]) -> None:
    if node.kind == "name":
        names.append(node.value)
    if node.kind == "window":
        name = node.children[0].value
        windows[name] = max(windows.get(name, 0.0), node.window)
    for child in node.children:
        _collect(child, names, windows)


def compile_expression(text: str) -> Expression:
    """Parse and compile; raises ExprError(message, position) on any syntax or usage error."""
    if not isinstance(text, str):
        raise ExprError("an expression must be a string", 0)
    try:
        return Expression(text, _Parser(text).parse())
    except RecursionError:
        raise ExprError("expression is nested too deeply", 0) from None
