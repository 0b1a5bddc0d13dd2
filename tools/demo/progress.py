"""The demo's terminal: one progress line per phase, not hundreds of lines of logs.

On a terminal the current phase's line is rewritten in place as it moves and ends with the time
it took; where the output is a file or a pipe (CI, ``make demo > out``), a phase prints its line
when it starts, at most one update every ``quiet_s`` seconds, and its end. The processes' own
logs go to files whose paths the demo prints.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable
from typing import IO

CLEAR_LINE = "\r\x1b[K"


class ProgressLine:
    """One phase at a time: ``start`` it, ``update`` its line, ``done`` ends it with how long it took."""

    def __init__(
        self,
        out: IO[str],
        *,
        tty: bool | None = None,
        quiet_s: float = 30.0,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.out = out
        self.tty = out.isatty() if tty is None else tty
        self.quiet_s = quiet_s
        self.clock = clock
        self.phase = ""
        self.started = 0.0
        self.last_text = ""
        self.last_printed = 0.0

    def start(self, phase: str, text: str = "") -> None:
        self.phase, self.started, self.last_text = phase, self.clock(), ""
        self.last_printed = self.started
        self._show(text or "…", force=True)

    def update(self, text: str) -> None:
        """The phase's state now; printed in place on a terminal, else only now and then."""
        if text == self.last_text:
            return
        quiet = not self.tty and self.clock() - self.last_printed < self.quiet_s
        self.last_text = text
        if not quiet:
            self._show(text)

    def done(self, text: str = "done") -> None:
        elapsed = self.clock() - self.started
        line = f"{self.phase}: {text} ({_duration(elapsed)})"
        self.out.write(f"{CLEAR_LINE}{line}\n" if self.tty else f"{line}\n")
        self.out.flush()
        self.phase = ""

    def _show(self, text: str, force: bool = False) -> None:
        line = f"{self.phase}: {text}"
        if self.tty:
            self.out.write(CLEAR_LINE + line)
        elif force or text:
            self.out.write(line + "\n")
        self.last_printed = self.clock()
        self.out.flush()


def _duration(seconds: float) -> str:
    seconds = round(seconds)
    return f"{seconds // 60} min {seconds % 60:02d} s" if seconds >= 60 else f"{seconds} s"


Run = tuple[str, int, str]  # a run's status, progress (%) and phase


def evaluation_text(items: Iterable[tuple[str, str, list[Run]]]) -> str:
    """The evaluations in one line: per item (a ticket "#4", or a run) its least advanced run's
    progress and phase while one runs ("#4 46% load cs_summary (task 3 of 6)"), else its status.

    ``items`` are (label, status, [(run status, progress %, phase), …]).
    """
    parts = []
    for label, status, runs in items:
        running = [run for run in runs if run[0] in ("queued", "running")]
        if running:
            _, progress, phase = min(running, key=lambda run: run[1])
            parts.append(f"{label} {progress}% {phase or 'queued'}")
        else:
            parts.append(f"{label} {status.replace('_', ' ')}")
    return " · ".join(parts)
