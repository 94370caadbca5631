"""Progress display for long steps (fetch, build, boot, runs), on stderr."""

from __future__ import annotations

import contextlib
import os
import sys
import time
from collections.abc import Iterator
from typing import TextIO

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

# Not a terminal (a pipe, a file, CI's log): no wrapping at rich's default 80 columns, which
# split table cells and long lines; $COLUMNS still wins where it is set.
UNWRAPPED = 10_000


def width_for(stream: TextIO) -> int | None:
    """The console width for `stream`: the terminal's (None: rich asks), else unwrapped."""
    if os.environ.get("COLUMNS") or stream.isatty():
        return None
    return UNWRAPPED


console = Console(stderr=True, highlight=False, width=width_for(sys.stderr))
out = Console(highlight=False, width=width_for(sys.stdout))  # reports and tables: stdout


@contextlib.contextmanager
def step(description: str) -> Iterator[None]:
    """Show a spinner with elapsed time while the block runs, then a one-line outcome."""
    start = time.monotonic()
    try:
        with console.status(f"{description} ..."):
            yield
    except BaseException:
        console.print(f"[red]✗[/red] {description} ({time.monotonic() - start:.1f} s)")
        raise
    console.print(f"[green]✓[/green] {description} ({time.monotonic() - start:.1f} s)")


def run_progress() -> Progress:
    """A transient bar for the repetitions of a run."""
    return Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(),
                    TimeElapsedColumn(), console=console, transient=True)  # fmt: skip
