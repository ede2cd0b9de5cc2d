"""What a preflight check found: one setting, its problem and the fix, and "did you mean" suggestions.

A :class:`Finding` is an ``error`` (the pipeline cannot run as configured; ``transient`` when a retry
may heal it: the service did not answer), a ``warning`` or ``ok`` (what was checked, and what a default
means). Pure: sources, the open step and the ``check`` command build and print them.
"""

from __future__ import annotations

import difflib
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

__all__ = ["ERROR", "OK", "WARNING", "Finding", "did_you_mean", "errors_of", "suggest"]

ERROR = "error"
WARNING = "warning"
OK = "ok"
LEVELS = (ERROR, WARNING, OK)


@dataclass(frozen=True)
class Finding:
    """One check's outcome: the ``setting`` it concerns (an argument, a param, a connection), the
    ``problem`` (or what was found, for ``ok``) and the ``fix``."""

    setting: str
    problem: str
    fix: str = ""
    level: str = ERROR
    #: an error a retry may heal (the service did not answer); other errors are permanent
    transient: bool = False

    def __post_init__(self) -> None:
        if self.level not in LEVELS:
            raise ValueError(f"a finding's level is one of {LEVELS}, got {self.level!r}")

    @property
    def is_error(self) -> bool:
        return self.level == ERROR

    def __str__(self) -> str:
        text = f"{self.setting}: {self.problem}"
        return f"{text}. Fix: {self.fix}" if self.fix else text


def errors_of(findings: Iterable[Finding]) -> list[Finding]:
    """The errors among ``findings``."""
    return [finding for finding in findings if finding.is_error]


def suggest(name: str, candidates: Iterable[str], limit: int = 3) -> list[str]:
    """Names among ``candidates`` close to ``name``: the same name in another case first, then by
    similarity (:mod:`difflib`)."""
    known = sorted(set(candidates))
    same_case = [c for c in known if c.lower() == name.lower() and c != name]
    lowered = {c.lower(): c for c in known}
    close = [lowered[c] for c in difflib.get_close_matches(name.lower(), list(lowered), n=limit, cutoff=0.6)]
    return list(dict.fromkeys([*same_case, *close]))[:limit]


def did_you_mean(name: str, candidates: Sequence[str] | Iterable[str], what: str) -> str:
    """``did you mean 'x'?`` (or the names that exist, or that none exists) for the fix of a finding
    about ``name``, a ``what`` that does not exist."""
    known = sorted(set(candidates))
    close = suggest(name, known)
    if close:
        return "did you mean " + " or ".join(repr(c) for c in close) + "?"
    if not known:
        return f"there is no {what}"
    shown = ", ".join(repr(c) for c in known[:10]) + (" …" if len(known) > 10 else "")
    return f"the {what}s are {shown}"
