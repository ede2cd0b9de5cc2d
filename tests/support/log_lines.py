"""A logger-like sink for tests: it keeps each formatted ``info`` message."""

from __future__ import annotations


class LineLog:
    """A logger-like sink that keeps the formatted messages in :attr:`lines`."""

    def __init__(self) -> None:
        self.lines: list[str] = []

    def info(self, message: str, *args: object) -> None:
        self.lines.append(message % args)
