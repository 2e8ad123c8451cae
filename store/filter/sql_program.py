"""An SQL92 filter tree compiled into the flat program the native evaluator runs (docs/native.md "sql_eval").

The program is one buffer of host-order fields: a header, the nodes (each after the nodes it
reads, so the last is the root and no node refers forward), the property names, the constants,
one list of int32s (the operands of AND and OR, the constants of IN) and a pool of UTF-8 bytes.
AND and OR chains are flattened into one node each: `(a AND b) AND c` evaluates as `a AND b AND c`
in RocketMQ's three-valued logic with its left-to-right short circuit. A node reached twice (the
value BETWEEN compares with both bounds) is written once.
"""

from __future__ import annotations

import struct

from store.filter.sql_parser import Node, Op
from store.filter.sql_values import JType, Value, double_bits

HEADER = struct.Struct("=iiiii")  # nodes, properties, constants, list entries, pool bytes
NODE = struct.Struct("=iiii")  # op, a, b, c
PROPERTY = struct.Struct("=ii")  # pool offset, length
CONSTANT = struct.Struct("=iiq")  # type (0 null, else JType), string length, payload
LIST_ENTRY = struct.Struct("=i")
NULL_TYPE = 0


class ProgramWriter:
    """Collects one program's parts while the tree is walked."""

    def __init__(self) -> None:
        self.nodes: list[bytes] = []
        self.properties: dict[str, tuple[int, int, int]] = {}  # name -> (index, pool offset, length)
        self.constants: list[bytes] = []
        self.entries: list[int] = []
        self.pool = bytearray()
        self.written: dict[int, int] = {}  # id(node) -> its index

    def text(self, text: str) -> tuple[int, int]:
        data = text.encode("utf-8")
        at = len(self.pool)
        self.pool += data
        return at, len(data)

    def constant(self, value: Value) -> int:
        if value is None:
            self.constants.append(CONSTANT.pack(NULL_TYPE, 0, 0))
        else:
            t, x = value
            if t is JType.STRING:
                at, n = self.text(str(x))
                self.constants.append(CONSTANT.pack(t, n, at))
            elif t is JType.DOUBLE:
                self.constants.append(CONSTANT.pack(t, 0, double_bits(float(x))))
            else:
                self.constants.append(CONSTANT.pack(t, 0, int(x)))
        return len(self.constants) - 1

    def property(self, name: str) -> int:
        if name not in self.properties:
            self.properties[name] = (len(self.properties), *self.text(name))
        return self.properties[name][0]

    def emit(self, op: Op, a: int = 0, b: int = 0, c: int = 0) -> int:
        self.nodes.append(NODE.pack(op, a, b, c))
        return len(self.nodes) - 1

    def write(self, node: Node) -> int:
        """The index of `node`, written with every node below it."""
        known = self.written.get(id(node))
        if known is not None:
            return known
        index = self._write(node)
        self.written[id(node)] = index
        return index

    def _write(self, node: Node) -> int:
        op = node.op
        if op is Op.CONST:
            return self.emit(op, self.constant(node.value))
        if op is Op.PROP:
            return self.emit(op, self.property(node.name))
        if op in (Op.AND, Op.OR):
            operands = [self.write(n) for n in flattened(node)]
            start = len(self.entries)
            self.entries += operands
            return self.emit(op, start, len(operands))
        children = [self.write(n) for n in node.args]
        if op in (Op.IN, Op.NOT_IN):
            items = [self.constant((JType.STRING, t)) for t in node.texts]
            start = len(self.entries)
            self.entries += items
            return self.emit(op, children[0], start, len(items))
        if node.texts:  # CONTAINS .. NOT_ENDS_WITH
            return self.emit(op, children[0], self.constant((JType.STRING, node.texts[0])))
        return self.emit(op, *children)

    def program(self) -> bytes:
        names = b"".join(PROPERTY.pack(at, n) for _, at, n in self.properties.values())
        header = HEADER.pack(len(self.nodes), len(self.properties), len(self.constants), len(self.entries), len(self.pool))
        entries = b"".join(LIST_ENTRY.pack(e) for e in self.entries)
        return b"".join((header, *self.nodes, names, *self.constants, entries, bytes(self.pool)))


def flattened(node: Node) -> list[Node]:
    """The operands of an AND (or OR) chain, left to right."""
    out: list[Node] = []
    stack = [node]
    while stack:
        n = stack.pop()
        if n.op is node.op:
            stack += reversed(n.args)
        else:
            out.append(n)
    return out


def compile_program(root: Node) -> bytes:
    """The program of a tree."""
    writer = ProgramWriter()
    writer.write(root)
    return writer.program()
