"""A one-line status on the terminal for commands that take a while.

Shown only when stderr is a terminal and the user did not pass --quiet; each message
replaces the previous one and the line is cleared when the work is done, so output that is
piped or captured stays exactly the report. The line's own carriage return and erase go
to the terminal as they are; the message, which may name a user's file, is escaped.
"""

import sys
import time

from workbook_builder.cli.printing import printable, unescaped


class Progress:
    def __init__(self, quiet: bool = False, stream=None):
        self.stream = stream or sys.stderr
        self.enabled = not quiet and self.stream.isatty()
        self.started = time.perf_counter()
        self._shown = False

    def __call__(self, message: str) -> None:
        if self.enabled:
            elapsed = time.perf_counter() - self.started
            terminal = unescaped(self.stream)
            terminal.write(f"\r\033[K{printable(message)} ({elapsed:.0f} s)")
            terminal.flush()
            self._shown = True

    def clear(self) -> None:
        if self._shown:
            terminal = unescaped(self.stream)
            terminal.write("\r\033[K")
            terminal.flush()
            self._shown = False


def silent(message: str) -> None:
    """The progress callback of library calls nobody watches."""
