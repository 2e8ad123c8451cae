"""SQL92 filter expressions parsed as RocketMQ's SelectorParser parses them, into a tree of `Node`s.

The grammar, its precedence and the checks made while the tree is built are RocketMQ's
(filter/src/main/java/.../parser/SelectorParser.jj and the expression classes' `create*` methods):

    or         := and ("OR" and)*
    and        := equality ("AND" equality)*
    equality   := comparison ("=" comparison | "<>" comparison | "IS" "NULL" | "IS" "NOT" "NULL")*
    comparison := unary ((">" | ">=" | "<" | "<=") unary
                        | ["NOT"] ("CONTAINS" | "STARTSWITH" | "ENDSWITH") string
                        | ["NOT"] "BETWEEN" unary "AND" unary
                        | ["NOT"] "IN" "(" string ("," string)* ")")*
    unary      := "+" unary | "-" unary | "NOT" unary | primary
    primary    := string | integer | float | "TRUE" | "FALSE" | "NULL" | identifier | "(" or ")"

so NOT binds tighter than a comparison: `NOT a = 1` is `(NOT a) = 1`, as in RocketMQ. Keywords
are case-insensitive, identifiers (`[A-Za-z_$][A-Za-z0-9_$]*`) name properties case-sensitively,
strings are single-quoted with '' for a quote, `--` comments run to a line end and `/* */` comments
anywhere. Where RocketMQ ignores whatever follows a complete expression, this parser refuses it
(`a = 1 b = 2` would filter on `a` alone), except a `--` comment that runs to the end of the text.

Bounds (RocketMQ has none; they keep parsing and the native evaluator's recursion bounded): at
most MAX_SQL_CHARS characters, MAX_NODES nodes, MAX_PROPERTIES distinct properties and MAX_DEPTH
levels, both of nesting while parsing and of the tree once AND and OR chains are flattened.
Every refusal is FilterInvalid with the 0-based position of the character it concerns.
"""

from __future__ import annotations

import enum
import re
from dataclasses import dataclass

from store.errors import StoreError
from store.filter.sql_values import INT_MAX, LONG_MAX, EvalAborted, JType, Value, compare

MAX_SQL_CHARS = 4_096  # longest expression, in characters
MAX_NODES = 512  # most nodes of one expression's tree (IN list strings count as nodes)
MAX_PROPERTIES = 64  # most distinct properties one expression names (the native evaluator's table)
MAX_DEPTH = 32  # deepest nesting of parentheses and prefixes, and deepest tree after flattening AND/OR
SMALLEST_DOUBLE = 5e-324  # Double.MIN_VALUE: ConstantExpression.createFloat refuses a float literal below it

KEYWORDS = frozenset({"NOT", "AND", "OR", "BETWEEN", "IN", "TRUE", "FALSE", "NULL", "IS", "CONTAINS", "STARTSWITH", "ENDSWITH"})
WHITESPACE = " \t\n\r\f"
DIGITS = frozenset("0123456789")  # ASCII only: JavaCC's ["0"-"9"]
PUNCTUATION = ("<>", ">=", "<=", "=", ">", "<", "(", ")", ",", "+", "-")
_IDENTIFIER = re.compile(r"[A-Za-z_$][A-Za-z0-9_$]*")
_DECIMAL = re.compile(r"0|[1-9][0-9]*[lL]?")
_FLOAT = re.compile(r"[0-9]+\.[0-9]*(?:[eE][+-]?[0-9]+)?|\.[0-9]+(?:[eE][+-]?[0-9]+)?|[0-9]+[eE][+-]?[0-9]+")


class FilterInvalid(StoreError):
    """Raised when an SQL92 filter expression cannot be parsed or breaks a bound; `position` is the
    0-based index of the character the problem concerns."""

    def __init__(self, message: str, position: int) -> None:
        super().__init__(f"{message} (at position {position})")
        self.reason = message
        self.position = position


class Op(enum.IntEnum):
    """A node's operation; the numbers are the native program's (docs/native.md "sql_eval")."""

    CONST = 1
    PROP = 2
    NEG = 3
    NOT = 4
    BOOL_CAST = 5  # a property used as a condition (UnaryExpression.createBooleanCast)
    AND = 6
    OR = 7
    EQ = 8
    GT = 9
    GE = 10
    LT = 11
    LE = 12
    IN = 13
    NOT_IN = 14
    CONTAINS = 15
    NOT_CONTAINS = 16
    STARTS_WITH = 17
    NOT_STARTS_WITH = 18
    ENDS_WITH = 19
    NOT_ENDS_WITH = 20


RELATIONS = {">": Op.GT, ">=": Op.GE, "<": Op.LT, "<=": Op.LE}
TEXT_TESTS = {"CONTAINS": (Op.CONTAINS, Op.NOT_CONTAINS), "STARTSWITH": (Op.STARTS_WITH, Op.NOT_STARTS_WITH),
              "ENDSWITH": (Op.ENDS_WITH, Op.NOT_ENDS_WITH)}  # fmt: skip
_NOT_FOLLOWERS = frozenset({"CONTAINS", "STARTSWITH", "ENDSWITH", "BETWEEN", "IN"})


@dataclass(frozen=True, slots=True)
class Node:
    """One expression of the tree, as RocketMQ builds it (AND and OR stay binary here)."""

    op: Op
    position: int  # where its text starts
    args: tuple[Node, ...] = ()
    value: Value = None  # CONST: the literal's value
    name: str = ""  # PROP: the property
    texts: tuple[str, ...] = ()  # IN, NOT_IN: the list; CONTAINS .. NOT_ENDS_WITH: the one search string
    depth: int = 1  # levels below and including it once AND and OR chains are flattened

    @property
    def is_boolean(self) -> bool:
        """Whether RocketMQ's class for it is a BooleanExpression (TRUE, FALSE and NULL literals included)."""
        if self.op is Op.CONST:
            return self.value is None or self.value[0] is JType.BOOL
        return self.op not in (Op.PROP, Op.NEG)


@dataclass(frozen=True, slots=True)
class Token:
    kind: str  # a keyword, a punctuation, "ID", "DECIMAL", "FLOAT", "STRING" or "EOF"
    text: str  # as written (a string literal's value for STRING)
    position: int


class Lexer:
    """Tokens on demand, as JavaCC's token manager makes them: the longest match, keywords before identifiers."""

    def __init__(self, text: str) -> None:
        self.text = text
        self.pos = 0

    def next(self) -> Token:
        self._skip()
        text, pos = self.text, self.pos
        if pos >= len(text):
            return Token("EOF", "", pos)
        ch = text[pos]
        if ch == "'":
            return self._string()
        if ch in DIGITS or (ch == "." and text[pos + 1 : pos + 2] in DIGITS):
            return self._number()
        m = _IDENTIFIER.match(text, pos)
        if m is not None:
            self.pos = m.end()
            word = m.group()
            return Token(word.upper() if word.upper() in KEYWORDS else "ID", word, pos)
        for p in PUNCTUATION:
            if text.startswith(p, pos):
                self.pos = pos + len(p)
                return Token(p, p, pos)
        raise FilterInvalid(f"unexpected character {ch!r}", pos)

    def _skip(self) -> None:
        text = self.text
        while self.pos < len(text):
            pos = self.pos
            if text[pos] in WHITESPACE:
                self.pos += 1
            elif text.startswith("/*", pos):
                end = text.find("*/", pos + 2)
                if end < 0:
                    raise FilterInvalid("a /* comment is not closed", pos)
                self.pos = end + 2
            elif text.startswith("--", pos):
                ends = [i for i in (text.find("\n", pos), text.find("\r", pos)) if i >= 0]
                if not ends:
                    return  # not a comment without a line end: two minus signs (as JavaCC reads it)
                end = min(ends)
                self.pos = end + (2 if text.startswith("\r\n", end) else 1)
            else:
                return

    def _string(self) -> Token:
        text, start = self.text, self.pos
        parts = []
        i = start + 1
        while True:
            end = text.find("'", i)
            if end < 0:
                raise FilterInvalid("a string is not closed", start)
            parts.append(text[i:end])
            if text.startswith("''", end):
                parts.append("'")
                i = end + 2
            else:
                self.pos = end + 1
                return Token("STRING", "".join(parts), start)

    def _number(self) -> Token:
        pos = self.pos
        decimal, floating = _DECIMAL.match(self.text, pos), _FLOAT.match(self.text, pos)
        d_end, f_end = decimal.end() if decimal else pos, floating.end() if floating else pos
        self.pos = max(d_end, f_end)
        return Token("FLOAT" if f_end > d_end else "DECIMAL", self.text[pos : self.pos], pos)


class Parser:
    """One expression's recursive descent; `parse()` answers its tree's root."""

    def __init__(self, text: str) -> None:
        if len(text) > MAX_SQL_CHARS:
            raise FilterInvalid(f"the expression is longer than {MAX_SQL_CHARS} characters", MAX_SQL_CHARS)
        self.text = text
        self.lexer = Lexer(text)
        self.ahead: list[Token] = []
        self.nodes = 0
        self.nesting = 0
        self.properties: set[str] = set()

    # Tokens -----------------------------------------------------------------------------------

    def peek(self, k: int = 0) -> Token:
        while len(self.ahead) <= k:
            self.ahead.append(self.lexer.next())
        return self.ahead[k]

    def take(self, kind: str | None = None, what: str = "") -> Token:
        token = self.peek()
        if kind is not None and token.kind != kind:
            raise FilterInvalid(f"expected {what or kind}, found {_shown(token)}", token.position)
        self.ahead.pop(0)
        return token

    # Grammar ----------------------------------------------------------------------------------

    def parse(self) -> Node:
        root = self.or_expr()
        end = self.peek()
        if end.kind != "EOF" and not (end.kind == "-" and self.text.startswith("--", end.position)):
            raise FilterInvalid(f"expected AND, OR or the end of the expression, found {_shown(end)}", end.position)
        return self.as_boolean(root)

    def or_expr(self) -> Node:
        left = self.and_expr()
        while self.peek().kind == "OR":
            self.take()
            left = self.logic(Op.OR, left, self.and_expr())
        return left

    def and_expr(self) -> Node:
        left = self.equality()
        while self.peek().kind == "AND":
            self.take()
            left = self.logic(Op.AND, left, self.equality())
        return left

    def equality(self) -> Node:
        left = self.comparison()
        while True:
            kind = self.peek().kind
            if kind in ("=", "<>"):
                self.take()
                equal = self.create_equal(left, self.comparison())
                left = equal if kind == "=" else self.node(Op.NOT, left.position, (equal,))
            elif kind == "IS":
                self.take()
                negated = self.peek().kind == "NOT"
                if negated:
                    self.take()
                self.take("NULL", "NULL after IS" + (" NOT" if negated else ""))
                is_null = self.node(Op.EQ, left.position, (left, self.node(Op.CONST, left.position)))
                left = self.node(Op.NOT, left.position, (is_null,)) if negated else is_null
            else:
                return left

    def comparison(self) -> Node:
        left = self.unary()
        while True:
            token = self.peek()
            if token.kind in RELATIONS:
                self.take()
                left = self.relation(RELATIONS[token.kind], left, self.unary())
                continue
            negated = token.kind == "NOT"
            if negated:
                after = self.peek(1)
                if after.kind not in _NOT_FOLLOWERS:
                    raise FilterInvalid(f"expected CONTAINS, STARTSWITH, ENDSWITH, BETWEEN or IN after NOT, found {_shown(after)}",
                                        after.position)  # fmt: skip
                self.take()
                token = self.peek()
            if token.kind in TEXT_TESTS:
                self.take()
                search = self.take("STRING", f"a string after {token.kind}").text
                op = TEXT_TESTS[token.kind][negated]
                left = self.node(op, left.position, (left,), texts=(search,))
            elif token.kind == "BETWEEN":
                self.take()
                low = self.unary()
                self.take("AND", "AND between BETWEEN's bounds")
                left = self.between(left, low, self.unary(), negated)
            elif token.kind == "IN":
                self.take()
                left = self.in_list(left, negated)
            else:
                return left

    def unary(self) -> Node:
        token = self.peek()
        if token.kind not in ("+", "-", "NOT"):
            return self.primary()
        self.take()
        self.nest(token.position)
        try:
            operand = self.unary()
        finally:
            self.nesting -= 1
        if token.kind == "+":
            return operand
        if token.kind == "-":
            return self.node(Op.NEG, token.position, (operand,))
        return self.node(Op.NOT, token.position, (self.as_boolean(operand),))

    def primary(self) -> Node:
        token = self.take()
        kind, pos = token.kind, token.position
        if kind == "STRING":
            return self.node(Op.CONST, pos, value=(JType.STRING, token.text))
        if kind == "DECIMAL":
            return self.node(Op.CONST, pos, value=decimal_value(token))
        if kind == "FLOAT":
            return self.node(Op.CONST, pos, value=float_value(token))
        if kind in ("TRUE", "FALSE"):
            return self.node(Op.CONST, pos, value=(JType.BOOL, kind == "TRUE"))
        if kind == "NULL":
            return self.node(Op.CONST, pos)
        if kind == "ID":
            self.properties.add(token.text)
            if len(self.properties) > MAX_PROPERTIES:
                raise FilterInvalid(f"an expression names at most {MAX_PROPERTIES} properties", pos)
            return self.node(Op.PROP, pos, name=token.text)
        if kind == "(":
            self.nest(pos)
            try:
                inner = self.or_expr()
            finally:
                self.nesting -= 1
            self.take(")", "')'")
            return inner
        raise FilterInvalid(f"expected a value, a property or '(', found {_shown(token)}", pos)

    def in_list(self, left: Node, negated: bool) -> Node:
        if left.op is not Op.PROP:
            raise FilterInvalid("IN needs a property on its left", left.position)
        self.take("(", "'(' after IN")
        items = [self.take("STRING", "a string in the IN list").text]
        while self.peek().kind == ",":
            self.take()
            items.append(self.take("STRING", "a string in the IN list").text)
        self.take(")", "',' or ')' in the IN list")
        self.nodes += len(items)
        return self.node(Op.NOT_IN if negated else Op.IN, left.position, (left,), texts=tuple(items))

    # Checks made while the tree is built (RocketMQ's create* methods) ---------------------------

    def node(
        self, op: Op, position: int, args: tuple[Node, ...] = (), value: Value = None, name: str = "", texts: tuple[str, ...] = ()
    ) -> Node:
        self.nodes += 1
        if self.nodes > MAX_NODES:
            raise FilterInvalid(f"an expression has at most {MAX_NODES} nodes", position)
        depth = 1 + max((a.depth - (a.op is op and op in (Op.AND, Op.OR)) for a in args), default=0)
        if depth > MAX_DEPTH:
            raise FilterInvalid(f"an expression nests at most {MAX_DEPTH} levels deep", position)
        return Node(op, position, args, value, name, texts, depth)

    def nest(self, position: int) -> None:
        self.nesting += 1
        if self.nesting > MAX_DEPTH:
            raise FilterInvalid(f"an expression nests at most {MAX_DEPTH} levels deep", position)

    def as_boolean(self, node: Node) -> Node:
        """SelectorParser.asBooleanExpression: a condition as it is, a property cast, anything else refused."""
        if node.is_boolean:
            return node
        if node.op is Op.PROP:
            return self.node(Op.BOOL_CAST, node.position, (node,))
        raise FilterInvalid("this is a value, not a condition", node.position)

    def logic(self, op: Op, left: Node, right: Node) -> Node:
        left = self.as_boolean(left)
        return self.node(op, left.position, (left, self.as_boolean(right)))

    def create_equal(self, left: Node, right: Node) -> Node:
        for side in (left, right):
            if side.op is Op.CONST and side.value is None:
                raise FilterInvalid("NULL cannot be compared with = or <>; write IS NULL or IS NOT NULL", side.position)
        if left.op is Op.CONST and right.op is Op.CONST and left.is_boolean and not right.is_boolean:
            raise FilterInvalid("TRUE or FALSE cannot be compared with a string or a number", left.position)
        return self.node(Op.EQ, left.position, (left, right))

    def relation(self, op: Op, left: Node, right: Node) -> Node:
        for side in (left, right):
            if side.op is Op.CONST:
                if side.value is None or side.value[0] not in (JType.INT, JType.LONG, JType.DOUBLE):
                    raise FilterInvalid("only numbers, properties and negations compare with >, >=, < or <=", side.position)
            elif side.is_boolean:
                raise FilterInvalid("a condition cannot be compared with >, >=, < or <=", side.position)
        return self.node(op, left.position, (left, right))

    def between(self, value: Node, low: Node, high: Node, negated: bool) -> Node:
        if negated:  # ComparisonExpression.createNotBetween checks nothing more
            return self.logic(Op.OR, self.relation(Op.LT, value, low), self.relation(Op.GT, value, high))
        if low.op is Op.CONST and high.op is Op.CONST:
            if low.value is None or high.value is None:
                raise FilterInvalid("BETWEEN's bounds cannot be NULL", low.position)
            try:
                ordered = compare(high.value, low.value) >= 0
            except EvalAborted:
                ordered = False
            if not ordered:
                raise FilterInvalid("BETWEEN's low bound must not be above its high bound", low.position)
        return self.logic(Op.AND, self.relation(Op.GE, value, low), self.relation(Op.LE, value, high))


def decimal_value(token: Token) -> Value:
    """ConstantExpression.createFromDecimal: an Integer when it fits, else a Long; past a Long refused."""
    value = int(token.text.rstrip("lL"))
    if value > LONG_MAX:
        raise FilterInvalid("an integer is at most 9223372036854775807", token.position)
    return (JType.INT if value <= INT_MAX else JType.LONG), value


def float_value(token: Token) -> Value:
    """ConstantExpression.createFloat: a Double, refused when infinite or below Double.MIN_VALUE (0.0 included)."""
    value = float(token.text)
    if value == float("inf") or value < SMALLEST_DOUBLE:
        raise FilterInvalid("a float literal must be finite and at least 4.9E-324 (RocketMQ refuses 0.0)", token.position)
    return JType.DOUBLE, value


def _shown(token: Token) -> str:
    if token.kind == "EOF":
        return "the end of the expression"
    text = token.text if token.kind != "STRING" else f"'{token.text}'"
    return repr(text[:40])


def parse(text: str) -> Node:
    """The tree of an expression: a condition (a BooleanExpression); FilterInvalid otherwise."""
    return Parser(text).parse()
