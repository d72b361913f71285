"""The one base class of user-facing errors.

A `UserInputError` means something a user gave (a file, a flag, a config, a checkpoint, a record,
a request) is wrong. Its message is one line that names the file/flag/line (and record number for
TFRecords) and what was expected. Command-line tools print it alone, with no traceback, and exit
non-zero; anything else is a bug and keeps its traceback.
"""
from __future__ import annotations


class UserInputError(ValueError):
    """Bad input from the user: the message is one line naming where and what was expected."""
