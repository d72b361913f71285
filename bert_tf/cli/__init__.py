"""The one command-line entry path of every bert_tf tool.

Each tool is a module here (`bert_tf.cli.run_classifier`, ...) with a `main()` that the console
scripts (`bert-tf-run-classifier`, ...) and `tools/<name>.py` both call. A tool is:

    from bert_tf.cli import run_tool          # first import: keeps TF's C++ start-up log quiet
    from bert_tf.tasks.classifier import ClassifierRunOptions, run_classifier

    def main(argv=None):
        run_tool(run_classifier, ClassifierRunOptions, argv)

`run_tool` defines the tool's flags from its options dataclass (`bert_tf.cli.flags_from_options`;
to add a flag, add a field: see `bert_tf.options`), parses the command line with absl, builds the
options object and calls the library function with it. It also:

  * accepts `--config=FILE` as an alias of absl's `--flagfile=FILE`;
  * keeps TensorFlow's C++ start-up logging quiet: importing this package imports TensorFlow
    quietly (`quiet_tensorflow_startup`) unless `--verbose` is on the command line;
  * turns a `bert_tf.errors.UserInputError` (or an OSError about a path, a NaN loss) into one
    line `error: ...` on stderr and exit status 1; `--verbose` shows the traceback instead.
"""
from __future__ import annotations

import os
import sys
from typing import Any, Callable, Sequence

VERBOSE_FLAG = "verbose"


def _wants_verbose(argv: Sequence[str]) -> bool:
    for arg in argv:
        if arg in ("--verbose", "--verbose=true", "--verbose=True", "--verbose=1"):
            return True
    return False


def quiet_tensorflow_startup(argv: Sequence[str]) -> None:
    """Imports TensorFlow without its C++ start-up log, unless `--verbose` is in `argv`.

    Sets TF_CPP_MIN_LOG_LEVEL=2 (C++ INFO and WARNING lines off; kept if the environment sets
    it). TensorFlow 2.21 writes its start-up lines (oneDNN, CUDA driver probing) before its
    logging reads that variable, so stderr's file descriptor points at /dev/null while
    TensorFlow is imported and its devices are listed; a Python exception there still shows.
    Takes effect only before TensorFlow is first imported.
    """
    if _wants_verbose(argv) or "tensorflow" in sys.modules:
        return
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    sys.stderr.flush()
    saved = os.dup(2)
    devnull = os.open(os.devnull, os.O_WRONLY)
    try:
        os.dup2(devnull, 2)
        import tensorflow as tf

        tf.config.list_physical_devices()
    finally:
        os.dup2(saved, 2)
        os.close(saved)
        os.close(devnull)


quiet_tensorflow_startup(sys.argv)


def expand_config_flag(argv: Sequence[str]) -> list[str]:
    """`--config=FILE` / `--config FILE` is an alias of absl's `--flagfile=FILE`."""
    out, i = [], 0
    argv = list(argv)
    while i < len(argv):
        arg = argv[i]
        if arg.startswith("--config="):
            out.append("--flagfile=" + arg[len("--config="):])
        elif arg == "--config" and i + 1 < len(argv):
            out.append("--flagfile=" + argv[i + 1])
            i += 1
        else:
            out.append(arg)
        i += 1
    return out


def one_line(message: str) -> str:
    """A message on one line (line breaks become "; ")."""
    return "; ".join(part.strip() for part in str(message).splitlines() if part.strip())


_PATH_ERRORS = (FileNotFoundError, FileExistsError, IsADirectoryError, NotADirectoryError,
                PermissionError)


def user_error_message(error: BaseException) -> str | None:
    """The one-line message for an error the user caused, None for a bug (keeps its traceback).

    User errors: `UserInputError` (every bert_tf input error), an OSError naming a path
    (missing file, a folder where a file was expected, permissions), TensorFlow's NotFound /
    PermissionDenied / AlreadyExists file errors, and FloatingPointError (training diverged).
    """
    from bert_tf.errors import UserInputError

    if isinstance(error, (UserInputError, FloatingPointError)):
        return one_line(str(error))
    if isinstance(error, OSError) and getattr(error, "filename", None) is not None:
        return one_line(f"{error.filename}: {error.strerror or error}")
    if isinstance(error, _PATH_ERRORS):  # raised by bert_tf with a message naming the path
        return one_line(str(error))
    tf = sys.modules.get("tensorflow")
    if tf is not None:
        file_errors = (tf.errors.NotFoundError, tf.errors.PermissionDeniedError,
                       tf.errors.AlreadyExistsError)
        if isinstance(error, file_errors):
            return one_line(error.message)
    return None


def run_tool(main_fn: Callable[[Any], Any], options_class: type,
             argv: Sequence[str] | None = None,
             report: Callable[[Any], None] | None = None) -> None:
    """Runs one tool: flags from `options_class`, absl parsing, `main_fn(options)`.

    Args:
      main_fn: the library function; receives the options dataclass.
      options_class: the tool's options dataclass (its fields are the tool's flags).
      argv: the command line (default: sys.argv), program name first.
      report: called with `main_fn`'s result (e.g. to print a summary).

    Exits with status 1 and one line `error: ...` on stderr for a user error (see
    `user_error_message`); `--verbose` re-raises it with its traceback.
    """
    from absl import app, flags

    from bert_tf.cli.flags_from_options import define_flags, options_from_flags

    argv = expand_config_flag(sys.argv if argv is None else argv)
    flag_values = flags.FLAGS
    names = define_flags(options_class, flag_values)
    if VERBOSE_FLAG not in flag_values:
        flags.DEFINE_bool(VERBOSE_FLAG, False, "Show TensorFlow's C++ start-up log and the full "
                          "traceback of an input error.", flag_values=flag_values)
    # --help / --helpshort list the flags of the main module (the script being run).
    for name in [*names, VERBOSE_FLAG]:
        flag_values.register_key_flag_for_module(sys.argv[0], flag_values[name])

    def _main(args: list[str]) -> None:
        verbose = flag_values[VERBOSE_FLAG].value
        try:
            options = options_from_flags(options_class, flag_values, args[1:])
            result = main_fn(options)
        except Exception as e:  # noqa: BLE001 (sorted into user errors and bugs below)
            message = user_error_message(e)
            if message is None or verbose:
                raise
            print(f"error: {message}", file=sys.stderr)
            sys.exit(1)
        if report is not None:
            report(result)

    def _parse_flags(args: list[str]) -> list[str]:
        # absl's own parser prints "FATAL Flags parsing error" and a hint on two lines; a bad
        # flag is a user error like any other: one line, exit 1.
        try:
            return flag_values(args)
        except flags.Error as e:
            print(f"error: {e}", file=sys.stderr)
            sys.exit(1)

    app.run(_main, argv=argv, flags_parser=_parse_flags)
