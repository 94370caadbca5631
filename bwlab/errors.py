"""The one exception type the CLI turns into a one-line error."""


class BwlabError(Exception):
    """A user-facing failure: bad input, missing tool, failed build, hung guest."""


def last_line(output: str, default: str = "no output") -> str:
    """The last non-blank line of a tool's output (its stderr, usually): what an error quotes."""
    lines = [line for line in output.strip().splitlines() if line.strip()]
    return lines[-1].strip() if lines else default
