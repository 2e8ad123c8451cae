"""Closest names for "did you mean" hints in problem details (a misspelled topic, an unknown route).

Bounded: past MAX_CANDIDATES names no hint is computed (difflib compares every candidate), so an
error reply never costs more than a few milliseconds however many topics there are.
"""

from __future__ import annotations

import difflib
from collections.abc import Iterable

# Most names compared for one hint.
MAX_CANDIDATES = 5_000
# How alike a name must be to be suggested (difflib's ratio, 0..1).
MIN_LIKENESS = 0.75


def closest(name: str, candidates: Iterable[str]) -> str | None:
    """The candidate most like `name` (not `name` itself), or None when none is alike enough or there are too many."""
    names: list[str] = []
    for n in candidates:
        if len(names) >= MAX_CANDIDATES:
            return None
        if n != name:
            names.append(n)
    found = difflib.get_close_matches(name, names, n=1, cutoff=MIN_LIKENESS)
    return found[0] if found else None


def closest_route(path: str, templates: Iterable[str]) -> str | None:
    """The route template most like `path`: each template's `{parameters}` take the path's segments at their
    places (a template of another length is compared as written), then the most alike above MIN_LIKENESS wins."""
    segments = path.strip("/").split("/")
    best: tuple[float, str] | None = None
    for template in templates:
        parts = template.strip("/").split("/")
        if len(parts) == len(segments):
            filled = "/".join(seg if part.startswith("{") else part for part, seg in zip(parts, segments, strict=True))
        else:
            filled = "/".join(parts)
        likeness = difflib.SequenceMatcher(None, "/".join(segments), filled).ratio()
        if likeness >= MIN_LIKENESS and (best is None or likeness > best[0]):
            best = (likeness, template)
    return best[1] if best is not None else None
