"""Errors a user can cause; the CLI prints them as one line and exits 2."""


class UserError(Exception):
    """Bad usage or bad input: shown to the user as one line, exit code 2."""
