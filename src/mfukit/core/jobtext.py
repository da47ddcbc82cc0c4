"""User text on its way into a generated job: checked, then quoted for the reader that will parse it.

A generated job is read by three parsers, each with its own rules, and user text (a path, a partition, an
image, a scenario name) must reach each one as exactly one word with exactly its value:

* bash, for the body of an sbatch script and for a printed command: every word goes through
  :func:`shell_word` (``shlex.quote``: single quotes, which bash never expands inside);
* sbatch, for ``#SBATCH`` lines, which are *not* read by a shell: sbatch splits them itself
  (``_get_argument`` in Slurm's src/sbatch/opt.c): blanks separate words unless inside ``"..."`` or
  ``'...'``, a backslash escapes the next character, an unquoted ``#`` starts a comment, and the line
  ends at the newline whatever the quoting. :func:`sbatch_directive` double-quotes a value that needs it
  and escapes ``"`` and ``\\``. A line that mentions ``hetjob`` or ``packjob`` (any case) separates the
  components of a heterogeneous job, so a value holding either word is refused;
* YAML, for Kubernetes manifests: values go through the serializer (``yaml.safe_dump``), never through
  string formatting; names and image references are checked against Kubernetes' and OCI's grammars.

A control character (newline, carriage return, NUL, ESC, ...), a Unicode line or paragraph separator, or
a format character (bidirectional overrides that make text display differently from what runs) is
refused in any of them: none can be expressed in an ``#SBATCH`` line, and none belongs in a path,
name or image. Refusals are :class:`~mfukit.errors.InputError` (exit 2) naming the flag or field.
"""

from __future__ import annotations

import re
import shlex
import unicodedata
from collections.abc import Sequence

from mfukit.errors import InputError

_REFUSED_CATEGORIES = ("Cc", "Cf", "Zl", "Zp")
"""control, format (bidi overrides, zero-width), line separator, paragraph separator"""
_SBATCH_BARE = re.compile(r"[A-Za-z0-9_.,:@%/=+-]*")
"""Values written without quotes; any other (a blank, a quote, ``#``, a backslash, non-ASCII, whose bytes a
non-UTF-8 locale's isspace() may call blank) goes in double quotes."""
_HETJOB_WORDS = ("hetjob", "packjob")
SLURM_NAME_MAX = 200
"""Longest partition name accepted here (Slurm has no fixed limit; a longer one is a mistake)."""
_SLURM_NAME = re.compile(r"[A-Za-z0-9._-]+")
_DNS_LABEL = re.compile(r"[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?")
_ENV_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
OCI_NAME_MAX = 255
"""distribution/reference: "the total length of a named reference is limited to 255 characters"."""
_HOST_COMPONENT = re.compile(r"[A-Za-z0-9]([A-Za-z0-9-]*[A-Za-z0-9])?")
_PORT = re.compile(r"[0-9]{1,5}")
_PATH_RUN = re.compile(r"[a-z0-9]+")
_PATH_SEPARATORS = frozenset({".", "_", "__"})
_TAG = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.-]{0,127}")
_DIGEST_ALGORITHM_RUN = re.compile(r"[A-Za-z][A-Za-z0-9]*")
_DIGEST_HEX = re.compile(r"[0-9a-fA-F]{32,}")


def check_text(value: str, *, field: str, source: str = "command line") -> str:
    """``value`` unchanged, or an InputError when it holds a control, format or line-separator character."""
    for index, char in enumerate(value):
        if unicodedata.category(char) in _REFUSED_CATEGORIES:
            raise InputError(
                f"holds the control character {char!r} (U+{ord(char):04X}) at position {index}",
                source=source,
                field=field,
                value=value,
                hint="remove it: newlines, NUL, escape sequences and bidi controls cannot be expressed "
                "safely in a job script or manifest",
            )
    return value


def shell_word(value: str, *, field: str) -> str:
    """``value`` as one bash word with exactly this value (no expansion of ``$``, backquotes or globs)."""
    return shlex.quote(check_text(value, field=field))


def shell_command(argv: Sequence[str], *, field: str) -> str:
    """A command line to print for the user to paste: every word checked and quoted."""
    return " ".join(shell_word(word, field=field) for word in argv)


def sbatch_directive(option: str, value: str, *, field: str) -> str:
    """``#SBATCH --option=value`` that sbatch reads back as the one argument ``--option=value``."""
    check_text(value, field=field)
    lowered = value.lower()
    for word in _HETJOB_WORDS:
        if word in lowered:
            raise InputError(
                f"holds {word!r}: sbatch reads an #SBATCH line that mentions it as a heterogeneous-job "
                "separator",
                source="command line",
                field=field,
                value=value,
                hint=f"choose a value without {word!r}",
            )
    if not _SBATCH_BARE.fullmatch(value):
        escaped = value.replace("\\", "\\\\").replace('"', '\\"')
        return f'#SBATCH --{option}="{escaped}"'
    return f"#SBATCH --{option}={value}"


def slurm_filename(path: str, *, field: str) -> str:
    """``path`` as a literal part of an sbatch ``--output`` pattern: ``%`` doubled (sbatch(1), "filename
    pattern": ``%%`` is the character "%"). A backslash would turn off every replacement (``%j`` too), so it
    is refused."""
    check_text(path, field=field)
    if "\\" in path:
        raise InputError(
            "holds a backslash: in an sbatch --output pattern it turns off the %j job-id replacement",
            source="command line",
            field=field,
            value=path,
            hint="choose a directory without a backslash",
        )
    return path.replace("%", "%%")


def slurm_names(value: str, *, field: str) -> str:
    """A comma-separated list of Slurm names (partitions, QOS, accounts): each of letters, digits, ``.``,
    ``_`` and ``-`` (no blank, ``=``, ``#`` or ``,`` fits in a name slurm.conf can declare)."""
    check_text(value, field=field)
    for name in value.split(","):
        if not name or len(name) > SLURM_NAME_MAX or not _SLURM_NAME.fullmatch(name):
            raise InputError(
                "is not a Slurm name or comma-separated list of names",
                source="command line",
                field=field,
                value=value,
                expected=f"letters, digits, '.', '_' and '-', at most {SLURM_NAME_MAX} characters each",
                hint="give the partition as `sinfo -h -o %P` prints it, e.g. --partition batch",
            )
    return value


def path_component(value: str, *, field: str, source: str = "command line") -> str:
    """``value`` as one directory name inside a fixed root: no ``/``, and not ``.`` or ``..``."""
    check_text(value, field=field, source=source)
    if not value or "/" in value or value in (".", ".."):
        raise InputError(
            "must be one directory name (it names the run's directory under the shared volume)",
            source=source,
            field=field,
            value=value,
            hint="a name without '/', other than '.' and '..'",
        )
    return value


def dns_label(value: str, *, field: str) -> str:
    """A Kubernetes object name that is an RFC 1123 DNS label (lower case, digits, ``-``, at most 63)."""
    if not _DNS_LABEL.fullmatch(value):
        raise InputError(
            "is not a DNS-1123 label",
            source="command line",
            field=field,
            value=value,
            expected="lower-case letters, digits and '-', starting and ending with a letter or digit, "
            "at most 63 characters",
        )
    return value


def env_name(value: str, *, field: str) -> str:
    """An environment variable name as POSIX shells accept it."""
    if not _ENV_NAME.fullmatch(value):
        raise InputError(
            "is not an environment variable name",
            source="catalog",
            field=field,
            value=value,
            expected="letters, digits and '_', not starting with a digit",
        )
    return value


def oci_reference(value: str, *, field: str) -> str:
    """``value`` when it is an image reference by the grammar of distribution/reference (reference.go):
    ``[host[:port]/]path[:tag][@algorithm:hex]``, path components lower case with ``.``, ``_``, ``__`` or
    runs of ``-`` between alphanumerics, the name at most 255 characters. Checked piece by piece with
    patterns that have no nested repetition, so any input is checked in linear time."""
    check_text(value, field=field)
    problem = _oci_problem(value)
    if problem is not None:
        raise InputError(
            f"is not an OCI image reference: {problem}",
            source="command line",
            field=field,
            value=value,
            expected="[registry[:port]/]name[:tag][@sha256:digest], e.g. registry.example/team/mfukit:0.1",
        )
    return value


def _oci_problem(value: str) -> str | None:
    rest, at, digest = value.partition("@")
    if at and (problem := _digest_problem(digest)) is not None:
        return problem
    slash = rest.rfind("/")
    colon = rest.rfind(":")
    name, tag = (rest[:colon], rest[colon + 1 :]) if colon > slash else (rest, None)
    if tag is not None and not _TAG.fullmatch(tag):
        return f"tag {tag!r} (letters, digits, '_', '.', '-', at most 128, not starting with '.' or '-')"
    if not name:
        return "no name"
    if len(name) > OCI_NAME_MAX:
        return f"name longer than {OCI_NAME_MAX} characters"
    components = name.split("/")
    first = components[0]
    if len(components) > 1 and ("." in first or ":" in first or first == "localhost"):
        host, has_port, port = first.partition(":")
        if not all(_HOST_COMPONENT.fullmatch(part) for part in host.split(".")):
            return f"registry host {host!r}"
        if has_port and not _PORT.fullmatch(port):
            return f"registry port {port!r}"
        components = components[1:]
    for component in components:
        if not _path_component_ok(component):
            return f"path component {component!r} (lower-case letters and digits, joined by '.', '_', '__' or '-')"
    return None


def _path_component_ok(component: str) -> bool:
    runs = _PATH_RUN.findall(component)
    separators = _PATH_RUN.split(component)
    if not runs or separators[0] or separators[-1]:
        return False  # empty, or starts or ends with a separator (or holds another character)
    return all(sep in _PATH_SEPARATORS or (sep and set(sep) == {"-"}) for sep in separators[1:-1])


def _digest_problem(digest: str) -> str | None:
    algorithm, colon, hex_part = digest.partition(":")
    if not colon or not _DIGEST_HEX.fullmatch(hex_part):
        return f"digest {digest!r} (algorithm:hex, at least 32 hex digits)"
    runs = re.split(r"[-_+.]", algorithm)
    if not all(_DIGEST_ALGORITHM_RUN.fullmatch(run) for run in runs):
        return f"digest algorithm {algorithm!r}"
    return None
