"""The ``xpuruntime`` command group: exit codes, error messages, logging and warnings.

Exit codes, the same for every command: 0 success (or no difference found); 1 a runtime
failure (the engine refused, a fallback under ``fallback="error"``, a file that cannot be
written) or a difference found (``compare``, ``lock diff``, ``policy diff``, ``bundle
verify``); 2 a usage error (an unknown flag, name or value, a policy setting or
``XPURUNTIME_POLICY_*`` variable that does not exist, input names or shapes the model does not
have, a missing folder, an empty or non-ONNX model file, an output path that would overwrite
an input). Errors are one line on stderr; ``--debug`` (or ``XPURUNTIME_DEBUG=1``) shows the
traceback instead.
"""

from __future__ import annotations

import logging
import os
import sys
import warnings
from collections.abc import Sequence
from typing import Any

import click

from xpuruntime.inference.cli.options import bundle_of
from xpuruntime.inference.errors import (
    InputError,
    InvalidModelError,
    ModelNotFoundError,
    ModelTypeError,
)
from xpuruntime.policies.errors import PolicyError, XpuRuntimeError
from xpuruntime.policies.json_output import SingleValueCommand

EXIT_FAILURE = 1
EXIT_USAGE = 2
#: Typed errors that say the command was asked something wrong: usage errors (exit 2).
USAGE_ERRORS: tuple[type[XpuRuntimeError], ...] = (
    PolicyError,
    InputError,
    InvalidModelError,
    ModelNotFoundError,
    ModelTypeError,
)
_DEBUG_VARIABLE = "XPURUNTIME_DEBUG"
_handler: logging.Handler | None = None


class CommandGroup(click.Group):
    """A click group whose errors are one line and whose exit codes follow the module doc;
    its commands take each single-valued option once, and its subgroups are of this class."""

    command_class = SingleValueCommand
    group_class = type

    def main(
        self,
        args: Sequence[str] | None = None,
        prog_name: str | None = None,
        complete_var: str | None = None,
        standalone_mode: bool = True,
        **extra: Any,
    ) -> Any:
        argv = list(sys.argv[1:] if args is None else args)
        debug = "--debug" in argv or os.environ.get(_DEBUG_VARIABLE, "") not in ("", "0")
        with warnings.catch_warnings():
            warnings.simplefilter("default")
            warnings.showwarning = _show_warning
            code = self._run(argv, prog_name, complete_var, debug, **extra)
        if standalone_mode:
            sys.exit(code)
        return code

    def _run(
        self,
        argv: list[str],
        prog_name: str | None,
        complete_var: str | None,
        debug: bool,
        **extra: Any,
    ) -> int:
        bundle_of.cache_clear()  # one command, one look at each bundle (tests run many)
        try:
            result = super().main(argv, prog_name, complete_var, standalone_mode=False, **extra)
        except click.UsageError as exc:
            where = f" (see '{exc.ctx.command_path} --help')" if exc.ctx is not None else ""
            _error(f"{exc.format_message()}{where}")
            return EXIT_USAGE
        except click.ClickException as exc:
            _error(exc.format_message())
            return exc.exit_code
        except click.Abort:
            _error("aborted")
            return EXIT_FAILURE
        except BrokenPipeError:  # `xpuruntime engines | head`: the reader left, not an error
            sys.stdout = open(os.devnull, "w")  # noqa: SIM115 (Python's own advice for EPIPE)
            return EXIT_FAILURE
        except XpuRuntimeError as exc:
            if debug:
                raise
            _error(f"{type(exc).__name__}: {exc}")
            return EXIT_USAGE if isinstance(exc, USAGE_ERRORS) else EXIT_FAILURE
        except OSError as exc:  # a file the command reads or writes: the system said no
            if debug:
                raise
            _error(f"{type(exc).__name__}: {exc}")
            return EXIT_FAILURE
        except MemoryError as exc:  # inputs or a model larger than this machine holds
            if debug:
                raise
            _error(f"MemoryError: out of memory ({exc}); try smaller inputs or --dim values")
            return EXIT_FAILURE
        except Exception as exc:
            if debug:
                raise
            _error(
                f"internal error {type(exc).__name__}: {exc} (run with --debug for the "
                f"traceback, and please report it)"
            )
            return EXIT_FAILURE
        return result if isinstance(result, int) else 0


def _error(message: str) -> None:
    click.echo(f"error: {' '.join(message.split())}", err=True)


def _show_warning(
    message: Warning | str, category: type[Warning], *_: object, **__: object
) -> None:
    # Fallback warnings are for the person at the terminal: the message, not a source line.
    click.echo(f"warning: {category.__name__}: {message}", err=True)


def configure_logging(verbose: int, debug: bool) -> None:
    """xpuruntime's messages on stderr: warnings by default; engines' own messages only from
    ``-v`` on (they are the engines' chatter, kept by the policy's ``engine_log_level``)."""
    global _handler
    root = logging.getLogger("xpuruntime")
    if _handler is not None:
        root.removeHandler(_handler)
    _handler = logging.StreamHandler(sys.stderr)  # the current stderr (tests swap it)
    _handler.setFormatter(logging.Formatter("%(levelname)s %(name)s: %(message)s"))
    root.addHandler(_handler)
    if debug:
        root.setLevel(logging.DEBUG)
        logging.getLogger("xpuruntime.engine").setLevel(logging.DEBUG)
        return
    root.setLevel(logging.INFO if verbose else logging.WARNING)
    engine_level = {0: logging.ERROR, 1: logging.WARNING, 2: logging.INFO}.get(verbose)
    logging.getLogger("xpuruntime.engine").setLevel(engine_level or logging.DEBUG)


@click.group(cls=CommandGroup, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(package_name="xpuruntime-inference", prog_name="xpuruntime")
@click.option(
    "--debug",
    is_flag=True,
    help="Show tracebacks and debug messages (also XPURUNTIME_DEBUG=1).",
)
@click.option(
    "-v",
    "--verbose",
    count=True,
    help="More messages on stderr: -v shows engines' warnings, -vv their info, -vvv all.",
)
def main(debug: bool, verbose: int) -> None:
    """xpuruntime: run models under an explicit execution policy and see what ran.

    Policy settings come from, highest first: command-line flags, XPURUNTIME_POLICY_*
    environment variables, the --policy file (or XPURUNTIME_POLICY_FILE), the defaults.
    `xpuruntime explain` shows which layer set each setting.
    """
    configure_logging(verbose, debug)
