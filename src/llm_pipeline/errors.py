"""The base of every error that is the user's to fix (bad data, settings, paths).

Steps report these as one clear message instead of a traceback; anything else is a bug
and keeps its traceback.
"""


class UserError(Exception):
    """A problem the user can fix; the message says what and where."""
