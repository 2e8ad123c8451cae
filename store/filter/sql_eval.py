"""The reference evaluator of SQL92 filter trees: RocketMQ's expression classes' `evaluate`, in Python.

A tree (store.filter.sql_parser.Node) is evaluated over a message's properties as RocketMQ's
ExpressionMessageFilter.isMatchedByCommitLog does: the message matches when the root evaluates to
TRUE; FALSE, NULL (unknown: a property the message lacks, compared) and an evaluation that throws in
Java (EvalAborted, for example `a > 5` where a is 'x') do not match. The order of evaluation is
Java's, including AND's and OR's short circuit, so an operand that would throw is reached exactly
when RocketMQ reaches it. Each rule below names the Java method it follows.

The native evaluator (store/_native/sql.c) is tested against this one; it also decides the
messages that evaluator leaves to Python.
"""

from __future__ import annotations

from collections.abc import Mapping

from store.filter.sql_parser import Node, Op
from store.filter.sql_values import FALSE, TRUE, EvalAborted, JType, Value, compare, double_compare, java_equals, java_parse_double

_ASKS = {Op.GT: lambda c: c > 0, Op.GE: lambda c: c >= 0, Op.LT: lambda c: c < 0, Op.LE: lambda c: c <= 0}
_INT_BITS = {JType.INT: 32, JType.LONG: 64}


def evaluate(node: Node, properties: Mapping[str, str]) -> Value:
    """The node's value (None for null); EvalAborted where RocketMQ's evaluation throws."""
    op = node.op
    if op is Op.CONST:
        return node.value
    if op is Op.PROP:
        text = properties.get(node.name)
        return None if text is None else (JType.STRING, text)
    if op is Op.NEG:
        return _negate(evaluate(node.args[0], properties))
    if op is Op.NOT:  # UnaryExpression.createNOT
        value = _boolean(evaluate(node.args[0], properties))
        return None if value is None else (FALSE if value[1] else TRUE)
    if op is Op.BOOL_CAST:  # UnaryExpression.createBooleanCast
        value = evaluate(node.args[0], properties)
        return None if value is None else (value if value[0] is JType.BOOL else FALSE)
    if op is Op.AND or op is Op.OR:
        return _logic(node, properties)
    if op is Op.EQ:
        return _equal(evaluate(node.args[0], properties), evaluate(node.args[1], properties))
    if op in _ASKS:
        return _relation(node, properties)
    if op is Op.IN or op is Op.NOT_IN:  # UnaryExpression.createInExpression
        value = evaluate(node.args[0], properties)
        if value is None or value[0] is not JType.STRING:
            return None
        return TRUE if (value[1] in node.texts) != (op is Op.NOT_IN) else FALSE
    return _text_test(node, properties)


def matches(node: Node, properties: Mapping[str, str]) -> bool:
    """Whether a message with these properties passes the filter: the root is TRUE."""
    try:
        return evaluate(node, properties) == TRUE
    except EvalAborted:
        return False


def _boolean(value: Value) -> Value:
    """The `(Boolean)` cast of AND, OR and NOT operands (a BooleanExpression never yields anything else)."""
    if value is not None and value[0] is not JType.BOOL:
        raise EvalAborted("a condition's value is not a Boolean (a ClassCastException in Java)")
    return value


def _negate(value: Value) -> Value:
    """UnaryExpression.createNegate: a number negated in its own class (Integer and Long wrap as Java's do), else null."""
    if value is None or value[0] not in (JType.INT, JType.LONG, JType.DOUBLE):
        return None
    t, x = value
    if t is JType.DOUBLE:
        return t, -float(x)
    bits = _INT_BITS[t]
    wrapped = (-int(x)) & ((1 << bits) - 1)
    return t, wrapped - (1 << bits) if wrapped >> (bits - 1) else wrapped


def _logic(node: Node, properties: Mapping[str, str]) -> Value:
    """LogicExpression.createAND / createOR: the deciding value stops it; otherwise null wins over the other."""
    deciding = FALSE if node.op is Op.AND else TRUE
    left = _boolean(evaluate(node.args[0], properties))
    if left == deciding:
        return deciding
    right = _boolean(evaluate(node.args[1], properties))
    if right == deciding:
        return deciding
    if left is None or right is None:
        return None
    return TRUE if deciding == FALSE else FALSE


def _equal(left: Value, right: Value) -> Value:
    """ComparisonExpression.doCreateEqual: null only when the left side alone is null."""
    if (left is None) != (right is None):
        return None if left is None else FALSE
    if left is None or java_equals(left, right):
        return TRUE
    return TRUE if compare(left, right) == 0 else FALSE


def _relation(node: Node, properties: Mapping[str, str]) -> Value:
    """ComparisonExpression.evaluate for >, >=, <, <=: null stops it before the right side is evaluated;
    two strings compare as Double.valueOf of each."""
    left = evaluate(node.args[0], properties)
    if left is None:
        return None
    right = evaluate(node.args[1], properties)
    if right is None:
        return None
    if left[0] is JType.STRING and right[0] is JType.STRING:
        order = double_compare(java_parse_double(str(left[1])), java_parse_double(str(right[1])))
    else:
        order = compare(left, right)
    return TRUE if _ASKS[node.op](order) else FALSE


def _text_test(node: Node, properties: Mapping[str, str]) -> Value:
    """ComparisonExpression's ContainsExpression, StartsWithExpression, EndsWithExpression and their NOT
    forms: FALSE for an empty search string, a null and anything but a String, whichever the form."""
    op, search = node.op, node.texts[0]
    if not search:
        return FALSE
    value = evaluate(node.args[0], properties)
    if value is None or value[0] is not JType.STRING:
        return FALSE
    text = str(value[1])
    if op in (Op.CONTAINS, Op.NOT_CONTAINS):
        found = search in text
    elif op in (Op.STARTS_WITH, Op.NOT_STARTS_WITH):
        found = text.startswith(search)
    else:
        found = text.endswith(search)
    negated = op in (Op.NOT_CONTAINS, Op.NOT_STARTS_WITH, Op.NOT_ENDS_WITH)
    return TRUE if found != negated else FALSE
