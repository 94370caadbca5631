"""Progress display for long steps (fetch, build, boot, runs), on stderr."""

from __future__ import annotations

import contextlib
import time
from collections.abc import Iterator

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

console = Console(stderr=True, highlight=False)


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
