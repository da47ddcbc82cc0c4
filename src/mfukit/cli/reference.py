"""Generate the CLI reference (``docs/cli.md``) from ``--help`` of every command.

``make docs`` runs ``python -m mfukit.cli.reference > docs/cli.md``; a test fails when the file is stale.
"""

from __future__ import annotations

import click

from mfukit.cli.main import cli

WIDTH = 100


def _walk(command: click.Command, path: list[str], ctx: click.Context | None) -> list[tuple[list[str], str]]:
    settings = {**command.context_settings, "max_content_width": WIDTH, "terminal_width": WIDTH}
    context = click.Context(command, info_name=path[-1], parent=ctx, **settings)
    pages = [(path, command.get_help(context))]
    if isinstance(command, click.Group):
        for name in command.list_commands(context):
            sub = command.get_command(context, name)
            if sub is not None and not sub.hidden:
                pages.extend(_walk(sub, [*path, name], context))
    return pages


def reference() -> str:
    """The whole reference as Markdown: one section per command, its help verbatim."""
    lines = [
        "# CLI reference",
        "",
        "Generated from `--help` by `make docs`; do not edit by hand.",
        "",
    ]
    for path, text in _walk(cli, ["mfukit"], None):
        lines += [f"## `{' '.join(path)}`", "", "```", text.rstrip(), "```", ""]
    return "\n".join(lines)


if __name__ == "__main__":
    print(reference(), end="")
