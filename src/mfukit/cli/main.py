"""The ``mfukit`` entry point: a lazily-loaded click group and the mapping of errors to exit codes.

Each capability is one click group (or command) in its own ``cli/<name>.py``, registered in
``COMMANDS``; it is imported only when used, so ``mfukit --help`` stays fast and one capability's heavy
imports never slow another.
"""

from __future__ import annotations

import importlib
import os
import sys
import traceback
from typing import Any

import click

from mfukit import __version__
from mfukit.errors import ExitCode, MfukitError, from_os_error

# name -> "module:attribute" of the click command; the order is the order of `mfukit --help`.
COMMANDS: dict[str, str] = {
    "size": "mfukit.cli.size:size",
    "estimate": "mfukit.cli.estimate:estimate",
    "plan": "mfukit.cli.plan:plan",
    "validate": "mfukit.cli.validate:validate",
    "calibrate": "mfukit.cli.validate:calibrate",
    "mfu": "mfukit.cli.mfu:mfu",
    "comm": "mfukit.cli.comm:comm",
    "fabric": "mfukit.cli.fabric:fabric",
    "ft": "mfukit.cli.ft:ft",
    "train": "mfukit.cli.train:train",
    "bench": "mfukit.cli.bench:bench",
    "sched": "mfukit.cli.sched:sched",
    "diagnose": "mfukit.cli.diagnose:diagnose",
    "watch": "mfukit.cli.watch:watch",
    "catalog": "mfukit.cli.catalog:catalog",
    "init": "mfukit.cli.init:init",
}


class LazyGroup(click.Group):
    """A group whose subcommands are imported on first use."""

    def __init__(self, *args: Any, lazy: dict[str, str], **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.lazy = lazy

    def list_commands(self, ctx: click.Context) -> list[str]:
        return [*self.lazy, *sorted(set(super().list_commands(ctx)) - set(self.lazy))]

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        if cmd_name in self.lazy:
            module_name, _, attribute = self.lazy[cmd_name].partition(":")
            command = getattr(importlib.import_module(module_name), attribute)
            if not isinstance(command, click.Command):
                raise TypeError(f"{self.lazy[cmd_name]} is not a click command")
            return command
        return super().get_command(ctx, cmd_name)

    def invoke(self, ctx: click.Context) -> Any:
        """Run the subcommand; map mfukit errors and refused paths or outputs to their exit codes (2, 3, 74)
        and anything else to 101."""
        debug = bool(ctx.params.get("debug"))
        try:
            code = super().invoke(ctx)
            sys.stdout.flush()  # a full disk under stdout shows here, not at exit past every handler
        except (click.exceptions.Exit, click.exceptions.Abort, click.ClickException):
            raise
        except MfukitError as error:
            _fail(ctx, error, debug)
        except BrokenPipeError:  # the reader went away (`mfukit ... | head`): stop quietly
            _silence_stdout()
            ctx.exit(0)
        except OSError as error:  # the filesystem refused a path or an output: name it, no traceback
            if error.filename is None:  # stdout itself: what is still buffered cannot be written either
                _silence_stdout()
            _fail(ctx, from_os_error(error), debug)
        except KeyboardInterrupt:
            click.echo("interrupted", err=True)
            ctx.exit(130)
        except Exception as error:  # a bug: say so plainly, show the traceback only on request
            if debug:
                traceback.print_exc()
            else:
                click.echo(
                    f"internal error: {type(error).__name__}: {error}\n"
                    "  this is a bug in mfukit; rerun with --debug for the traceback and report it",
                    err=True,
                )
            ctx.exit(int(ExitCode.INTERNAL))
        if isinstance(code, int) and code:
            ctx.exit(code)
        return code


def _fail(ctx: click.Context, error: MfukitError, debug: bool) -> None:
    if debug:
        traceback.print_exc()
    click.echo(f"error: {error.render()}", err=True)
    ctx.exit(int(error.exit_code))


def _silence_stdout() -> None:
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
    except (OSError, ValueError):  # stdout is not a real file (tests): nothing to silence
        pass


@click.group(
    cls=LazyGroup,
    lazy=COMMANDS,
    context_settings={"help_option_names": ["-h", "--help"], "max_content_width": 100},
)
@click.version_option(__version__, "--version", prog_name="mfukit")
@click.option("--debug", is_flag=True, help="Show the traceback of internal errors.")
def cli(debug: bool) -> None:
    """mfukit: size, plan, network, fault tolerance, scheduling and diagnosis of GPU training clusters,
    with MFU as the north star.

    Every command prints a table (default), JSON (--format json, an envelope with inputs, assumptions,
    result and warnings) or CSV. Exit codes: 0 ok; 1 the answer is negative (infeasible, failed check,
    error findings); 2 bad input (an unusable path too); 3 a needed component is missing; 74 an output could not
    be written (disk full, I/O error); 101 internal error.
    """


def main() -> None:
    cli.main(prog_name="mfukit")
