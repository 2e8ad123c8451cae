"""tidemq-store: look into a store directory offline (no broker, no Spark), for forensics.

    tidemq-store ls PATH                  each commitlog file: messages, bytes, where and why its walk stopped
    tidemq-store cat PATH [--topic T] [--queue Q] [--limit N] [--body text|base64|none]
                                          one JSON object per message
    tidemq-store stats PATH [--json]      per topic and queue: messages, bytes, offsets, store times

PATH is a store root (holding commitlog/) or a commitlog directory. Files are walked as
`pipeline.commitlog_reader` does (blank end markers and torn tails handled as recovery
does). Exit status: 0 when done, 2 when PATH is not a store or an argument is bad, 1
when `--strict` is given and a file has a torn or corrupt record.
"""

from __future__ import annotations

import argparse
import base64
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any, TextIO

import orjson

from pipeline.commitlog_reader import CommitLogFile, CommitLogReadError, FileScan, FileWalk, StopReason, list_commitlog_files
from store import COMPRESSED_FLAG, MessageStoreConfig, decode_message, inflate_body

EXIT_OK = 0
EXIT_DAMAGED = 1
EXIT_USAGE = 2
BODY_LIMIT_BYTES = MessageStoreConfig.max_message_size_bytes  # inflate no further than the default largest message


@dataclass(slots=True)
class QueueStats:
    messages: int = 0
    bytes: int = 0
    min_queue_offset: int = -1
    max_queue_offset: int = -1
    first_store_ms: int = -1
    last_store_ms: int = -1

    def add(self, queue_offset: int, size: int, store_ms: int) -> None:
        if self.messages == 0:
            self.min_queue_offset = self.max_queue_offset = queue_offset
            self.first_store_ms = self.last_store_ms = store_ms
        else:
            self.min_queue_offset = min(self.min_queue_offset, queue_offset)
            self.max_queue_offset = max(self.max_queue_offset, queue_offset)
            self.first_store_ms = min(self.first_store_ms, store_ms)
            self.last_store_ms = max(self.last_store_ms, store_ms)
        self.messages += 1
        self.bytes += size


def walk_store(path: str, check_crc: bool) -> Iterator[tuple[FileScan, Iterator[dict[str, Any]]]]:
    """For each file, its scan (complete once its messages are consumed) and its decoded messages.

    The files are listed at once, so a bad path fails before anything is printed."""
    return _walks(list_commitlog_files(path), check_crc)


def _walks(files: list[CommitLogFile], check_crc: bool) -> Iterator[tuple[FileScan, Iterator[dict[str, Any]]]]:
    for file in files:
        walk = FileWalk(file, check_crc)

        def messages(walk: FileWalk = walk) -> Iterator[dict[str, Any]]:
            for buf, pos, _size in walk:
                yield decode_message(buf, pos)

        yield walk.scan, messages()


def cmd_ls(args: argparse.Namespace, out: TextIO) -> int:
    damaged = False
    walks = walk_store(args.path, not args.no_crc)
    out.write(f"{'file':<22} {'size':>12} {'messages':>10} {'bytes':>12} {'stop':<6} {'end_offset':>20}  detail\n")
    for scan, messages in walks:
        for _ in messages:
            pass
        damaged |= scan.stop is StopReason.TORN
        name = f"{scan.file.start_offset:020d}"
        out.write(
            f"{name:<22} {scan.file.size_bytes:>12} {scan.messages:>10} {scan.message_bytes:>12} "
            f"{scan.stop.value:<6} {scan.end_offset:>20}  {scan.detail}\n"
        )
    return EXIT_DAMAGED if damaged and args.strict else EXIT_OK


def cmd_cat(args: argparse.Namespace, out: TextIO) -> int:
    damaged = False
    left = args.limit
    for scan, messages in walk_store(args.path, not args.no_crc):
        if left is not None and left <= 0:
            break
        for msg in messages:
            if left is not None and left <= 0:
                break
            if (args.topic is not None and msg["topic"] != args.topic) or (args.queue is not None and msg["queue_id"] != args.queue):
                continue
            out.write(orjson.dumps(_message_json(msg, args.body)).decode() + "\n")
            if left is not None:
                left -= 1
        damaged |= scan.stop is StopReason.TORN
    return EXIT_DAMAGED if damaged and args.strict else EXIT_OK


def _message_json(msg: dict[str, Any], body_mode: str) -> dict[str, Any]:
    out = {k: msg[k] for k in ("topic", "queue_id", "queue_offset", "commitlog_offset", "msg_id", "tags", "keys", "store_size")}
    out["born_timestamp"] = msg["born_timestamp"]
    out["store_timestamp"] = msg["store_timestamp"]
    out["properties"] = msg["properties"]
    body: bytes = msg["body"]
    if msg["sys_flag"] & COMPRESSED_FLAG:  # shown as produced, as the broker's JSON views show it
        body, status = inflate_body(body, msg["sys_flag"], BODY_LIMIT_BYTES)
        out["compressed"] = True
        if status.failed:
            out["body_error"] = status.value
    if body_mode == "text":
        out["body"] = body.decode("utf-8", errors="replace")
    elif body_mode == "base64":
        out["body"] = base64.b64encode(body).decode("ascii")
    return out


def cmd_stats(args: argparse.Namespace, out: TextIO) -> int:
    queues: dict[tuple[str, int], QueueStats] = {}
    files = []
    for scan, messages in walk_store(args.path, not args.no_crc):
        for msg in messages:
            key = (msg["topic"], msg["queue_id"])
            stats = queues.get(key)
            if stats is None:
                stats = queues[key] = QueueStats()
            stats.add(msg["queue_offset"], msg["store_size"], msg["store_timestamp"])
        files.append(scan)
    damaged = [s for s in files if s.stop is StopReason.TORN]
    report: dict[str, Any] = {
        "files": len(files),
        "messages": sum(s.messages for s in queues.values()),
        "bytes": sum(s.bytes for s in queues.values()),
        "damaged_files": [{"file": f"{s.file.start_offset:020d}", "offset": s.end_offset, "detail": s.detail} for s in damaged],
        "queues": [{"topic": t, "queue_id": q, **_asdict(s)} for (t, q), s in sorted(queues.items())],
    }
    if args.json:
        out.write(orjson.dumps(report, option=orjson.OPT_INDENT_2).decode() + "\n")
    else:
        out.write(f"files {report['files']}  messages {report['messages']}  bytes {report['bytes']}\n")
        for d in report["damaged_files"]:
            out.write(f"damaged: file {d['file']} at commitlog offset {d['offset']}: {d['detail']}\n")
        out.write(f"{'topic':<32} {'queue':>5} {'messages':>10} {'bytes':>12} {'offsets':>23}\n")
        for q in report["queues"]:
            offsets = f"{q['min_queue_offset']}..{q['max_queue_offset']}"
            out.write(f"{q['topic']:<32} {q['queue_id']:>5} {q['messages']:>10} {q['bytes']:>12} {offsets:>23}\n")
    return EXIT_DAMAGED if damaged and args.strict else EXIT_OK


def _asdict(stats: QueueStats) -> dict[str, int]:
    return {name: getattr(stats, name) for name in QueueStats.__slots__}


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="tidemq-store", description="Read a tidemq store directory offline.")
    sub = parser.add_subparsers(dest="command", required=True)
    for name, helptext in (
        ("ls", "list commitlog files and how far each holds good records"),
        ("cat", "print messages as JSON lines"),
        ("stats", "message counts and bytes per topic and queue"),
    ):
        p = sub.add_parser(name, help=helptext)
        p.add_argument("path", help="store root (holding commitlog/) or commitlog directory")
        p.add_argument("--no-crc", action="store_true", help="skip the body CRC check")
        p.add_argument("--strict", action="store_true", help="exit 1 when a file has a torn or corrupt record")
    cat = sub.choices["cat"]
    cat.add_argument("--topic", help="only this topic")
    cat.add_argument("--queue", type=int, help="only this queue id")
    cat.add_argument("--limit", type=_non_negative, help="at most this many messages")
    cat.add_argument("--body", choices=("text", "base64", "none"), default="text", help="how to print bodies (default text)")
    sub.choices["stats"].add_argument("--json", action="store_true", help="print JSON")
    return parser


def _non_negative(text: str) -> int:
    value = int(text)
    if value < 0:
        raise argparse.ArgumentTypeError("must be >= 0")
    return value


COMMANDS = {"ls": cmd_ls, "cat": cmd_cat, "stats": cmd_stats}


def main(argv: list[str] | None = None, out: TextIO | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        return COMMANDS[args.command](args, out or sys.stdout)
    except CommitLogReadError as e:
        sys.stderr.write(f"tidemq-store: {e}\n")
        return EXIT_USAGE
    except BrokenPipeError:  # `tidemq-store cat ... | head`
        return EXIT_OK


if __name__ == "__main__":
    sys.exit(main())
