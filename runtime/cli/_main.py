"""``main()``: parse the arguments, run the command, and turn every expected failure
into one line on stderr and an exit status (see :mod:`runtime.cli._errors`)."""

from __future__ import annotations

import contextlib
import errno
import importlib
import os
import sys
from collections.abc import Callable, Sequence

from ._errors import EXIT_INTERRUPTED, EXIT_USAGE, CliError, Interrupted, explain, leaf
from ._parsing import COMMANDS, build_parser

__all__ = ["main"]


def main(argv: Sequence[str] | None = None) -> int:
    """Run the ``tidelog`` command line with ``argv`` (default ``sys.argv[1:]``); return
    the exit status."""
    argv = sys.argv[1:] if argv is None else argv
    args = build_parser(argv).parse_args(argv)
    module, function, _ = COMMANDS[args.command]
    try:
        if args.command == "demo":
            from ._demo import run_demo

            return run_demo(args.db, keep=args.keep)
        command: Callable[..., int] = getattr(
            importlib.import_module(f"{__package__}.{module}"), function
        )
        try:
            return command(args)
        except BaseException as exc:
            found = leaf(exc)
            if found is exc:
                raise
            raise found from None  # a one-member group from trio: report its member
    except CliError as exc:
        print(exc.message, file=sys.stderr)
        return exc.code
    except Interrupted as exc:
        print(f"tidelog: interrupted: {exc.done}", file=sys.stderr)
        return EXIT_INTERRUPTED
    except KeyboardInterrupt:
        follows = args.command == "serve" or (args.command == "tail" and args.follow)
        return 0 if follows else EXIT_INTERRUPTED
    except BrokenPipeError:
        # The reader went away (``tidelog show ... | head``): not an error of ours.
        _drop_output()
        return 0
    except OSError as exc:
        # The output cannot be written (a full disk, a quota, an I/O error): say so once,
        # and let nothing try to write the rest at exit.
        _drop_output()
        where = "the output" if exc.filename is None else str(exc.filename)
        what = exc.strerror or str(exc)
        hint = ""
        if exc.errno in (errno.ENOSPC, errno.EDQUOT):
            hint = " (free some space, or write somewhere else)"
        print(f"tidelog: {args.command}: cannot write {where}: {what}{hint}", file=sys.stderr)
        return EXIT_USAGE
    except Exception as exc:
        from runtime import TidelogError

        if isinstance(exc, TidelogError):
            from ._opening import shown

            print(explain(exc, shown(getattr(args, "db", ""))), file=sys.stderr)
            return EXIT_USAGE
        raise


def _drop_output() -> None:
    """Send what stdout still buffers, and anything written later, to the null device
    (the real output is gone: a closed pipe, a full disk)."""
    with contextlib.suppress(OSError, ValueError):
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        os.close(devnull)
