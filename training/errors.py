"""The error type of bad user input and environment: a malformed config, a missing or unusable model, a
damaged checkpoint, an output path that would overwrite files the project did not create.

Raise ``UserInputError`` with a message that names the problem and what would be valid, in one line.  The
command line prints it as ``replicalab <command>: <message>`` and exits non-zero, without a traceback
(``--debug`` or ``REPLICALAB_DEBUG=1`` shows it).  Anything else that escapes is a bug.
"""


class UserInputError(Exception):
    """Bad input or environment, reported to the user as one line (see the module docstring)."""
