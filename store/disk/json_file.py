"""Atomic JSON files for metadata: write a temp file, fsync it, rename over, fsync the directory.

A reader therefore sees the old or the new content, never a torn one. A `.bak` copy
of the previous content is kept, as RocketMQ's ConfigManager does, and read when the
main file is missing or cannot be parsed.

RocketMQ's metadata files are written by fastjson, which writes a map's integer keys without
quotes (ConsumerOffsetManager's `{"offsetTable":{"T@G":{0:7}}}`, ScheduleMessageService's
delayOffset.json `{"offsetTable":{1:5}}`): not JSON. `loads_metadata` reads that form too, by
quoting exactly those keys (`quote_integer_keys`, a tokenizer that skips string contents, so a
name holding braces or digits is never touched); everything else must be strict JSON. tidemq
writes quoted keys, which fastjson reads back as integers.
"""

from __future__ import annotations

import json
import logging
import os
from typing import Any

import orjson

from store.errors import MetadataCorrupt

log = logging.getLogger("tidemq.store")


def write_json_atomically(path: str, data: Any) -> None:
    """`data` as indented JSON with sorted keys (orjson: a table of 100,000 topics takes milliseconds)."""
    write_bytes_atomically(
        path, orjson.dumps(data, option=orjson.OPT_INDENT_2 | orjson.OPT_SORT_KEYS | orjson.OPT_NON_STR_KEYS), keep_backup=True
    )


def write_bytes_atomically(path: str, payload: bytes, mode: int = 0o644, keep_backup: bool = False) -> None:
    """Write `payload` to a temp file, fsync it, rename it over `path` (the old content to `.bak`
    when `keep_backup`), fsync the directory: a reader sees the old or the new bytes, never a mix."""
    directory = os.path.dirname(path) or "."
    os.makedirs(directory, exist_ok=True)
    tmp = path + ".tmp"
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, mode)
    try:
        os.write(fd, payload)
        os.fsync(fd)
    finally:
        os.close(fd)
    if keep_backup and os.path.exists(path):
        os.replace(path, path + ".bak")
    os.replace(tmp, path)
    dir_fd = os.open(directory, os.O_RDONLY)
    try:
        os.fsync(dir_fd)
    finally:
        os.close(dir_fd)


def quote_integer_keys(text: str) -> str:
    """`text` with every unquoted integer object key (`{0:7}`, `, -1 :`) quoted; nothing else changes.

    Walks the text once, skipping string literals (with their escapes), and keeps a stack of the
    open containers, so only a member name position of an object is ever rewritten.
    """
    out: list[str] = []
    stack: list[str] = []
    expect_key = False
    done = 0  # text[:done] is already in `out`
    i, n = 0, len(text)
    while i < n:
        c = text[i]
        if c == '"':
            i = _string_end(text, i)
            expect_key = False
            continue
        if c in " \t\r\n":
            i += 1
            continue
        if expect_key and (c.isdigit() or c == "-"):
            end = _integer_end(text, i)
            after = end
            while after < n and text[after] in " \t\r\n":
                after += 1
            if end > i + (c == "-") and after < n and text[after] == ":":
                out += [text[done:i], '"', text[i:end], '"']
                done = i = end
                expect_key = False
                continue
        if c in "{[":
            stack.append(c)
        elif c in "}]" and stack:
            stack.pop()
        expect_key = c == "{" or (c == "," and bool(stack) and stack[-1] == "{")
        i += 1
    out.append(text[done:])
    return "".join(out)


def _string_end(text: str, start: int) -> int:
    """The index just past the string literal opening at `start` (the text's end when unterminated)."""
    i = start + 1
    while i < len(text):
        c = text[i]
        if c == "\\":
            i += 2
        elif c == '"':
            return i + 1
        else:
            i += 1
    return len(text)


def _integer_end(text: str, start: int) -> int:
    i = start + 1 if text[start] == "-" else start
    while i < len(text) and text[i].isascii() and text[i].isdigit():
        i += 1
    return i


def loads_metadata(raw: bytes) -> Any:
    """Parse a metadata file: JSON, or fastjson's output with unquoted integer keys. ValueError otherwise."""
    text = raw.decode("utf-8")
    try:
        return json.loads(text)
    except ValueError:
        return json.loads(quote_integer_keys(text))


def read_json(path: str) -> Any | None:
    """The file's content, its .bak copy when the file is missing or torn, or None when neither exists."""
    for candidate in (path, path + ".bak"):
        if not os.path.exists(candidate):
            continue
        try:
            with open(candidate, "rb") as fh:
                return loads_metadata(fh.read())
        except (ValueError, OSError) as exc:
            log.warning("cannot read %s: %s", candidate, exc)
            continue
    if os.path.exists(path):
        raise MetadataCorrupt(f"{path} and its backup cannot be parsed")
    return None
