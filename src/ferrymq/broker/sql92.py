"""SQL92 property filters (RocketMQ's `expressionType=SQL92`): a tokenizer, a recursive-descent
parser to a small tree, and an evaluator with RocketMQ's semantics. No `eval` anywhere.

Grammar (RocketMQ's SelectorParser.jj, keywords case-insensitive):

    expr       := and (OR and)*
    and        := equality (AND equality)*
    equality   := comparison ( '=' comparison | '<>' comparison | IS [NOT] NULL )*
    comparison := unary ( ('>'|'>='|'<'|'<=') unary | [NOT] BETWEEN unary AND unary
                        | [NOT] IN '(' string (',' string)* ')'
                        | [NOT] (CONTAINS|STARTSWITH|ENDSWITH) string )*
    unary      := '+' unary | '-' unary | NOT unary | primary
    primary    := literal | identifier | '(' expr ')'
    literal    := 'string' ('' escapes a quote) | 123 | 123L | 1.5 | .5 | 1e3 | TRUE | FALSE | NULL

Semantics, as RocketMQ evaluates them: a missing property is NULL; comparisons with NULL are
unknown (no match), and AND/OR/NOT use three-valued logic; property values are strings, turned
into a number (or a boolean) when compared with one; `>`/`<` between two strings compare them as
numbers; a message matches only when the whole expression is TRUE. A value that cannot be
converted makes that message not match.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Mapping
from typing import Any, NoReturn

# A SQL value (None for unknown, bool, int, float or str): its type is checked as it is evaluated.
Value = Any

MAX_NESTING = 64  # parentheses and unary operators: bounded, so garbage cannot exhaust the stack
MAX_LENGTH = 16 * 1024
_LONG_MIN, _LONG_MAX = -(1 << 63), (1 << 63) - 1


class SqlFilterError(ValueError):
    """A SQL92 expression that does not parse, or that RocketMQ would refuse to compile."""


class _EvalError(Exception):
    """A value that cannot be compared (e.g. "abc" against a number): the message does not match."""


# --- tokens ---------------------------------------------------------------------------------------

_KEYWORDS = frozenset(
    ("NOT", "AND", "OR", "BETWEEN", "IN", "TRUE", "FALSE", "NULL", "IS", "CONTAINS", "STARTSWITH", "ENDSWITH")
)
_TOKEN = re.compile(
    r"""
    (?P<space>\s+|--[^\n\r]*|/\*.*?\*/)
  | (?P<float>\d+\.\d*(?:[eE][+-]?\d+)?|\.\d+(?:[eE][+-]?\d+)?|\d+[eE][+-]?\d+)
  | (?P<int>(?:0|[1-9]\d*)[lL]?)
  | (?P<string>'(?:[^']|'')*')
  | (?P<name>[A-Za-z_$][A-Za-z0-9_$]*)
  | (?P<op><>|>=|<=|[=<>(),+-])
    """,
    re.VERBOSE | re.DOTALL,
)


def _tokens(text: str) -> list[tuple[str, Value, int]]:
    """(kind, value, position) for each token; kinds: op, keyword, name, string, number, end."""
    out: list[tuple[str, Value, int]] = []
    pos = 0
    while pos < len(text):
        m = _TOKEN.match(text, pos)
        if m is None:
            what = "unterminated string" if text[pos] == "'" else f"unexpected character {text[pos]!r}"
            raise SqlFilterError(f"{what} at position {pos}")
        kind, raw = m.lastgroup or "", m.group()
        if kind == "name" and raw.upper() in _KEYWORDS:
            out.append(("keyword", raw.upper(), pos))
        elif kind == "int":
            digits = raw.rstrip("lL")
            value = int(digits) if len(digits) <= 19 else _LONG_MAX + 1
            if value > _LONG_MAX:
                raise SqlFilterError(f"number {raw} at position {pos} is out of the 64-bit range")
            out.append(("number", value, pos))
        elif kind == "float":
            real = float(raw)
            if math.isinf(real):
                raise SqlFilterError(f"number {raw} at position {pos} is out of range")
            out.append(("number", real, pos))
        elif kind == "string":
            out.append(("string", raw[1:-1].replace("''", "'"), pos))
        elif kind != "space":
            out.append((kind, raw, pos))
        pos = m.end()
    out.append(("end", None, len(text)))
    return out


# --- the tree -------------------------------------------------------------------------------------
# Each node evaluates against a message's properties to None (unknown), a bool, a number or a str.

Props = Mapping[str, str]


class Node:
    boolean = False  # a node whose value is TRUE/FALSE/unknown (RocketMQ's BooleanExpression)

    def evaluate(self, props: Props) -> Value:
        raise NotImplementedError


class Constant(Node):
    def __init__(self, value: Value) -> None:
        self.value = value
        self.boolean = value is None or isinstance(value, bool)

    def evaluate(self, props: Props) -> Value:
        return self.value

    def __repr__(self) -> str:
        if self.value is None or isinstance(self.value, bool):
            return str(self.value).upper().replace("NONE", "NULL")
        if isinstance(self.value, str):
            return "'" + self.value.replace("'", "''") + "'"
        return repr(self.value)


class Property(Node):
    def __init__(self, name: str) -> None:
        self.name = name

    def evaluate(self, props: Props) -> Value:
        return props.get(self.name)

    def __repr__(self) -> str:
        return self.name


class Negate(Node):
    def __init__(self, operand: Node) -> None:
        self.operand = operand

    def evaluate(self, props: Props) -> Value:
        v = self.operand.evaluate(props)
        return -v if type(v) in (int, float) else None

    def __repr__(self) -> str:
        return f"-{self.operand!r}"


class Not(Node):
    boolean = True

    def __init__(self, operand: Node) -> None:
        self.operand = operand

    def evaluate(self, props: Props) -> Value:
        v = self.operand.evaluate(props)
        return None if v is None else not v

    def __repr__(self) -> str:
        return f"NOT {self.operand!r}"


class BooleanCast(Node):
    """A non-boolean value where a condition is expected: TRUE only for a TRUE value."""

    boolean = True

    def __init__(self, operand: Node) -> None:
        self.operand = operand

    def evaluate(self, props: Props) -> Value:
        v = self.operand.evaluate(props)
        return None if v is None else v is True

    def __repr__(self) -> str:
        return repr(self.operand)


class And(Node):
    boolean = True

    def __init__(self, operands: list[Node]) -> None:
        self.operands = operands

    def evaluate(self, props: Props) -> Value:
        unknown = False
        for operand in self.operands:  # in order, stopping at the first FALSE, as Java's does
            v = operand.evaluate(props)
            if v is False:
                return False
            unknown = unknown or v is None
        return None if unknown else True

    def __repr__(self) -> str:
        return "(" + " AND ".join(map(repr, self.operands)) + ")"


class Or(Node):
    boolean = True

    def __init__(self, operands: list[Node]) -> None:
        self.operands = operands

    def evaluate(self, props: Props) -> Value:
        unknown = False
        for operand in self.operands:
            v = operand.evaluate(props)
            if v is True:
                return True
            unknown = unknown or v is None
        return None if unknown else False

    def __repr__(self) -> str:
        return "(" + " OR ".join(map(repr, self.operands)) + ")"


_ORDER: dict[str, Callable[[int], bool]] = {
    ">": lambda c: c > 0,
    ">=": lambda c: c >= 0,
    "<": lambda c: c < 0,
    "<=": lambda c: c <= 0,
}


class Compare(Node):
    """`>`, `>=`, `<`, `<=`: unknown when either side is NULL."""

    boolean = True

    def __init__(self, op: str, left: Node, right: Node) -> None:
        self.op, self.left, self.right, self._test = op, left, right, _ORDER[op]

    def evaluate(self, props: Props) -> Value:
        lv = self.left.evaluate(props)
        if lv is None:
            return None
        rv = self.right.evaluate(props)
        if rv is None:
            return None
        if type(lv) is str and type(rv) is str:  # strings are ordered only as numbers
            lv, rv = _to_float(lv), _to_float(rv)
        return self._test(_compare(lv, rv))

    def __repr__(self) -> str:
        return f"({self.left!r} {self.op} {self.right!r})"


class Equal(Node):
    """`=` (and IS NULL, which compares with the NULL constant)."""

    boolean = True

    def __init__(self, left: Node, right: Node) -> None:
        self.left, self.right = left, right

    def evaluate(self, props: Props) -> Value:
        lv, rv = self.left.evaluate(props), self.right.evaluate(props)
        if lv is None or rv is None:
            if lv is None and rv is None:
                return True
            return None if lv is None else False
        if type(lv) is type(rv) and lv == rv:
            return True
        return _compare(lv, rv) == 0

    def __repr__(self) -> str:
        return f"({self.left!r} = {self.right!r})"


class In(Node):
    boolean = True

    def __init__(self, prop: Property, values: frozenset[str], negated: bool) -> None:
        self.prop, self.values, self.negated = prop, values, negated

    def evaluate(self, props: Props) -> Value:
        v = self.prop.evaluate(props)
        if type(v) is not str:
            return None
        return (v in self.values) != self.negated

    def __repr__(self) -> str:
        return f"({self.prop!r} {'NOT IN' if self.negated else 'IN'} {sorted(self.values)!r})"


_STRING_TESTS: dict[str, Callable[[str, str], bool]] = {
    "CONTAINS": str.__contains__,
    "STARTSWITH": str.startswith,
    "ENDSWITH": str.endswith,
}


class StringTest(Node):
    """CONTAINS / STARTSWITH / ENDSWITH (and their NOT forms): FALSE for a missing or empty operand."""

    boolean = True

    def __init__(self, kind: str, operand: Node, search: str, negated: bool) -> None:
        self.kind, self.operand, self.search, self.negated = kind, operand, search, negated
        self._test = _STRING_TESTS[kind]

    def evaluate(self, props: Props) -> Value:
        v = self.operand.evaluate(props)
        if not self.search or type(v) is not str:
            return False
        return self._test(v, self.search) != self.negated

    def __repr__(self) -> str:
        return f"({self.operand!r} {'NOT ' if self.negated else ''}{self.kind} {self.search!r})"


# --- value conversion (RocketMQ's ComparisonExpression with string conversion on) -----------------

_INT = re.compile(r"[+-]?\d+\Z")
_FLOAT = re.compile(r"\s*[+-]?(?:\d+\.?\d*|\.\d+)(?:[eE][+-]?\d+)?[dDfF]?\s*\Z")


def _to_int(s: str) -> int:
    if not _INT.match(s) or len(s) > 20:
        raise _EvalError(f"{s[:40]!r} is not a 64-bit integer")
    value = int(s)
    if not _LONG_MIN <= value <= _LONG_MAX:
        raise _EvalError(f"{s!r} is out of the 64-bit range")
    return value


def _to_float(s: str) -> float:
    if not _FLOAT.match(s):
        raise _EvalError(f"{s!r} is not a number")
    return float(s.strip().rstrip("dDfF"))


def _compare(lv: Value, rv: Value) -> int:
    """-1, 0 or 1, converting a string to the other side's type; values of unrelated types
    order as -1, as in RocketMQ."""
    lt, rt = type(lv), type(rv)
    if lt is not rt:
        if lt is str:
            if rt is bool:
                lv = lv.lower() == "true"
            elif rt is int:
                lv = _to_int(lv)
            elif rt is float:
                lv = _to_float(lv)
        elif rt is str:
            if lt is int:
                rv = _to_int(rv)
            elif lt is float:
                rv = _to_float(rv)
            else:  # a boolean against a string: RocketMQ fails the evaluation
                raise _EvalError("a boolean cannot be compared with a string")
        elif lt is bool or rt is bool:
            return -1
    try:
        return (lv > rv) - (lv < rv)
    except TypeError:
        return -1


# --- the parser -----------------------------------------------------------------------------------


class _Parser:
    def __init__(self, text: str) -> None:
        self.tokens = _tokens(text)
        self.i = 0
        self.depth = 0
        self.names: set[str] = set()  # the properties the expression reads

    def peek(self, ahead: int = 0) -> tuple[str, Value, int]:
        return self.tokens[min(self.i + ahead, len(self.tokens) - 1)]

    def at(self, value: Value, ahead: int = 0) -> bool:
        kind, v, _ = self.peek(ahead)
        return kind in ("keyword", "op") and v == value

    def take(self, value: Value) -> bool:
        if self.at(value):
            self.i += 1
            return True
        return False

    def expect(self, value: str) -> None:
        if not self.take(value):
            self.fail(f"expected {value}")

    def fail(self, what: str) -> NoReturn:
        kind, v, pos = self.peek()
        found = "the end" if kind == "end" else repr(v)
        raise SqlFilterError(f"{what} but found {found} at position {pos}")

    def nested(self, parse: Callable[[], Node]) -> Node:
        self.depth += 1
        if self.depth > MAX_NESTING:
            raise SqlFilterError(f"expression nested deeper than {MAX_NESTING} levels")
        try:
            return parse()
        finally:
            self.depth -= 1

    def parse(self) -> Node:
        node = _as_boolean(self.or_expr())
        if self.peek()[0] != "end":
            self.fail("expected AND, OR or the end")
        return node

    def or_expr(self) -> Node:
        operands = [self.and_expr()]
        while self.take("OR"):
            operands.append(self.and_expr())
        return Or([_as_boolean(o) for o in operands]) if len(operands) > 1 else operands[0]

    def and_expr(self) -> Node:
        operands = [self.equality()]
        while self.take("AND"):
            operands.append(self.equality())
        return And([_as_boolean(o) for o in operands]) if len(operands) > 1 else operands[0]

    def equality(self) -> Node:
        left = self.comparison()
        while True:
            if self.take("="):
                left = _equal(left, self.comparison())
            elif self.take("<>"):
                left = Not(_equal(left, self.comparison()))
            elif self.at("IS"):
                self.i += 1
                negated = self.take("NOT")
                self.expect("NULL")
                left = Equal(left, Constant(None))
                left = Not(left) if negated else left
            else:
                return left

    def comparison(self) -> Node:
        left = self.unary()
        while True:
            kind, op, _ = self.peek()
            if kind == "op" and op in _ORDER:
                self.i += 1
                left = _ordered(op, left, self.unary())
                continue
            negated = self.at("NOT") and any(
                self.at(k, 1) for k in ("BETWEEN", "IN", "CONTAINS", "STARTSWITH", "ENDSWITH")
            )
            if negated:
                self.i += 1
            if self.take("BETWEEN"):
                low = self.unary()
                self.expect("AND")
                left = _between(left, low, self.unary(), negated)
            elif self.take("IN"):
                left = self.in_list(left, negated)
            elif any(self.at(k) for k in _STRING_TESTS):
                test = self.peek()[1]
                self.i += 1
                left = StringTest(test, left, self.string(), negated)
            else:
                return left

    def in_list(self, left: Node, negated: bool) -> Node:
        if not isinstance(left, Property):
            raise SqlFilterError(f"IN needs a property on its left, not {left!r}")
        self.expect("(")
        values = [self.string()]
        while self.take(","):
            values.append(self.string())
        self.expect(")")
        return In(left, frozenset(values), negated)

    def string(self) -> str:
        kind, value, _ = self.peek()
        if kind != "string":
            self.fail("expected a 'string'")
        self.i += 1
        return value

    def unary(self) -> Node:
        if self.take("+"):
            return self.nested(self.unary)
        if self.take("-"):
            operand = self.nested(self.unary)
            if isinstance(operand, Constant) and type(operand.value) in (int, float):
                return Constant(-operand.value)
            return Negate(operand)
        if self.take("NOT"):
            return Not(_as_boolean(self.nested(self.unary)))
        return self.primary()

    def primary(self) -> Node:
        kind, value, _ = self.peek()
        if kind in ("string", "number"):
            self.i += 1
            return Constant(value)
        if kind == "name":
            self.i += 1
            self.names.add(value)
            return Property(value)
        if kind == "keyword" and value in ("TRUE", "FALSE", "NULL"):
            self.i += 1
            return Constant({"TRUE": True, "FALSE": False, "NULL": None}[value])
        if self.take("("):
            node = self.nested(self.or_expr)
            self.expect(")")
            return node
        self.fail("expected a value, a property or (")


def _as_boolean(node: Node) -> Node:
    return node if node.boolean else BooleanCast(node)


def _orderable(node: Node) -> None:
    """Only numbers and properties can be ordered (RocketMQ's checkLessThanOperand)."""
    if isinstance(node, Constant):
        if type(node.value) not in (int, float):
            raise SqlFilterError(f"{node!r} cannot be compared with > >= < <=; only numbers can")
    elif node.boolean:
        raise SqlFilterError(f"the condition {node!r} cannot be compared with > >= < <=")


def _ordered(op: str, left: Node, right: Node) -> Node:
    _orderable(left)
    _orderable(right)
    return Compare(op, left, right)


def _equal(left: Node, right: Node) -> Node:
    for side in (left, right):
        if isinstance(side, Constant) and side.value is None:
            raise SqlFilterError("NULL cannot be compared with = or <>: use IS NULL / IS NOT NULL")
    if (
        isinstance(left, Constant) and isinstance(right, Constant)
        and isinstance(left.value, bool) and not isinstance(right.value, bool)
    ):  # fmt: skip
        raise SqlFilterError(f"{left!r} cannot be compared with {right!r}")
    return Equal(left, right)


def _between(value: Node, low: Node, high: Node, negated: bool) -> Node:
    if isinstance(low, Constant) and isinstance(high, Constant):
        if low.value is None or high.value is None:
            raise SqlFilterError("BETWEEN bounds cannot be NULL")
        try:
            backwards = _compare(high.value, low.value) < 0
        except _EvalError:
            backwards = False
        if backwards:
            raise SqlFilterError(f"BETWEEN {low!r} AND {high!r}: the low bound is above the high one")
    if negated:
        return Or([_ordered("<", value, low), _ordered(">", value, high)])
    return And([_ordered(">=", value, low), _ordered("<=", value, high)])


# --- the public face ------------------------------------------------------------------------------


class SqlFilter:
    """A compiled SQL92 expression; `matches(properties)` is True only when it evaluates to TRUE."""

    def __init__(self, expression: str) -> None:
        if not expression or not expression.strip():
            raise SqlFilterError("the SQL92 expression is empty")
        if len(expression) > MAX_LENGTH:
            raise SqlFilterError(f"the SQL92 expression is longer than {MAX_LENGTH} characters")
        self.expression = expression
        parser = _Parser(expression)
        self.tree = parser.parse()
        self.names = frozenset(parser.names)  # only these properties need to be read from a message

    def matches(self, props: Props) -> bool:
        try:
            return self.tree.evaluate(props) is True
        except _EvalError:
            return False

    def __repr__(self) -> str:
        return f"SqlFilter({self.tree!r})"
