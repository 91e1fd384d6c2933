"""A progress bar on stderr for the command line's long runs."""
from __future__ import annotations

import sys
import time

DELAY = 1.0  # seconds of work before the bar appears: a shorter run shows none
WIDTH = 24


class Progress:
    """Counts `total` units of work (users) and draws a bar on stderr once the work has run DELAY seconds.

    Drawn only when `shown` (not --quiet) and stderr is a terminal, so that logs and pipes get no control
    characters; `close()` ends the line."""

    def __init__(self, total, what, shown):
        self.total, self.what, self.done = total, what, 0
        self.shown = shown and sys.stderr.isatty()
        self.started = self.drawn_at = time.perf_counter()
        self.drawn = False

    def advance(self, n):
        self.done += n
        now = time.perf_counter()
        if self.shown and now - self.started >= DELAY and (now - self.drawn_at >= 0.1 or self.done >= self.total):
            self.drawn_at, self.drawn = now, True
            share = self.done / self.total if self.total else 1.0
            filled = int(WIDTH * share)
            elapsed = now - self.started
            left = elapsed * (1 - share) / share if share else float("nan")
            print(f"\r{self.what} [{'#' * filled}{'-' * (WIDTH - filled)}] {100 * share:3.0f}% "
                  f"{self.done:,}/{self.total:,} users, {elapsed:.1f} s, about {left:.0f} s left ",
                  end="", file=sys.stderr, flush=True)

    def close(self):
        if self.drawn:
            print(file=sys.stderr)


def chunks(users, shown):
    """`users` in pieces for a progress bar (about 1% each, at least 256 users), or whole when no bar is shown."""
    if not (shown and sys.stderr.isatty()):
        return [users]
    size = max(256, -(-users.size // 100))
    return [users[start:start + size] for start in range(0, max(users.size, 1), size)]
