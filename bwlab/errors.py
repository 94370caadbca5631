"""The one exception type the CLI turns into a one-line error."""


class BwlabError(Exception):
    """A user-facing failure: bad input, missing tool, failed build, hung guest."""
