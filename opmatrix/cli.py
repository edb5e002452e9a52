"""The ``opmatrix`` command line: the stable surface documented in README.md.

Each verb's options are declared once, as a frozen dataclass (:mod:`opmatrix.options`); the
parser is built from them and parses into them. Each verb's work lives in the subpackage that
owns it and is imported only when that verb runs (``validate`` and ``schema`` never import torch)::

    opmatrix validate schema/examples/*.yaml
    opmatrix probe --backend refaccel --ops softmax,add --out out/refaccel-g2

Exit codes: 0 success, 1 a verdict against the input (gate blocked, doctor failed, faults), 2
invalid input or usage (the message names what and where), 130 interrupted.
"""

from __future__ import annotations

import argparse
import importlib
import sys
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

from opmatrix.parsing import CliParser
from opmatrix.schema.exitcode import ExitCode
from opmatrix.schema.options import Options, option_fields, split_list

if TYPE_CHECKING:
    from opmatrix.options import SchemaOptions, ValidateOptions

__all__ = ["main", "UsageError", "add_options", "build_parser", "options_for"]

#: verb -> "module:function" that runs it for the CLI, taking the verb's options, returning an exit code
#: (:mod:`opmatrix.commands` renders what the library returns).
HANDLERS: dict[str, str] = {
    "probe": "opmatrix.commands:probe",
    "merge": "opmatrix.api:merge",
    "validate": "opmatrix.cli:_validate",
    "query": "opmatrix.commands:query",
    "report": "opmatrix.commands:report",
    "gate": "opmatrix.commands:gate",
    "diff": "opmatrix.commands:diff",
    "doctor": "opmatrix.commands:doctor",
    "schema": "opmatrix.cli:_schema",
    "explain": "opmatrix.explanation:command",
    "bench": "opmatrix.api:bench",
    "compat": "opmatrix.api:compat",
}


from opmatrix.schema.io import UsageError  # noqa: E402 - re-exported: handlers raise it for exit 2


class _Once(argparse._StoreAction):
    """A value option given twice is a usage error (argparse would keep the last one silently)."""

    def __call__(self, parser: argparse.ArgumentParser, namespace: argparse.Namespace, values: Any,
                 option_string: str | None = None) -> None:
        seen: set[str] = namespace.__dict__.setdefault("_given", set())
        if self.dest in seen:
            parser.error(f"{option_string or self.dest}: given more than once; give it once")
        seen.add(self.dest)
        super().__call__(parser, namespace, values, option_string)


def add_options(parser: argparse.ArgumentParser, cls: type[Options]) -> None:
    """Declare ``cls``'s options on ``parser``: positionals in order, then the flags.

    The defaults are the dataclass's, copied (a list as its comma text, which argparse parses like
    a given value), so that ``--help`` and the CLI reference show them: declared once."""
    for opt in option_fields(cls):
        spec = opt.spec
        kw: dict[str, Any] = {"help": spec.help.replace("%", "%%")}
        if not opt.required and not spec.positional:
            repeatable = opt.kind == "list" and spec.repeat
            kw["default"] = ",".join(opt.default) if opt.kind == "list" and opt.default and not repeatable \
                else argparse.SUPPRESS if repeatable else opt.default
        if spec.metavar:
            kw["metavar"] = spec.metavar
        if spec.positional:
            if opt.kind == "list":
                kw["nargs"] = "+"
            if spec.choices:
                kw["choices"] = spec.choices
            parser.add_argument(opt.name, **kw)
            continue
        if opt.kind == "bool":
            kw["action"] = "store_true"
        elif opt.kind == "list" and spec.repeat:
            kw["action"] = "append"
        elif opt.kind == "list":
            kw["type"] = split_list
        elif opt.kind in ("int", "float"):
            kw["type"] = int if opt.kind == "int" else float
        elif spec.choices:
            kw["choices"] = spec.choices
        kw.setdefault("action", _Once)  # a value option given twice is refused, never the last one kept
        if spec.bare is not None:
            kw.update(nargs="?", const=spec.bare)
        if opt.required:
            kw["required"] = True
        parser.add_argument(opt.flag, dest=opt.name, **kw)


def build_parser() -> argparse.ArgumentParser:
    """The argument parser of every verb, built from the options each verb declares."""
    from opmatrix.options import COMMANDS

    parser = CliParser(
        prog="opmatrix",
        description="Probe a PyTorch accelerator backend operator by operator, build its support "
        "matrix, render docs, answer capability queries and gate releases.",
    )
    parser.add_argument("--version", action="store_true", help="print the version and exit")
    sub = parser.add_subparsers(dest="verb", metavar="VERB")
    for cls in COMMANDS:
        add_options(sub.add_parser(cls.verb, help=cls.summary, description=cls.summary), cls)
    return parser


def options_for(verb: str, values: dict[str, Any]) -> Options:
    """The options object of ``verb`` from parsed values (UsageError when a value is refused)."""
    from opmatrix.options import COMMANDS

    cls = next(c for c in COMMANDS if c.verb == verb)
    return cls.from_values(values)


def _validate(args: ValidateOptions) -> int:
    from opmatrix.schema import ArtifactError, Contract, Matrix, count_matrix, validate_file

    bad = 0
    for path in args.files:
        try:
            model = validate_file(path)
        except ArtifactError as exc:
            bad += 1
            from opmatrix.schema.text import terminal_text

            for line in exc.messages:
                print(terminal_text(line), file=sys.stderr)
            continue
        if isinstance(model, Matrix):
            what = f"matrix, {count_matrix(model).line()}"
            if model.integrity is None:
                if args.strict and not args.allow_unsealed:
                    bad += 1
                    print(f"{path}: unsealed matrix (no integrity block): nothing shows it was not edited or cut "
                          "short; regenerate it with opmatrix probe/merge, or pass --allow-unsealed", file=sys.stderr)
                    continue
                what += "; UNSEALED: no integrity block, content not proven unedited"
        elif isinstance(model, Contract):
            what = f"contract, release {model.release}, level {model.level}"
        else:  # pragma: no cover - validate_file returns one of the two
            what = type(model).__name__
        print(f"{path}: valid ({what})")
    return ExitCode.USAGE if bad else ExitCode.OK


def _schema(args: SchemaOptions) -> int:
    from opmatrix.schema.jsonschema import json_schema_text

    sys.stdout.write(json_schema_text(args.kind))
    return ExitCode.OK


def _handler(verb: str) -> Callable[[Any], int] | None:
    module_name, _, func = HANDLERS[verb].partition(":")
    try:
        module = importlib.import_module(module_name)
    except ModuleNotFoundError as exc:
        if exc.name and module_name.startswith(exc.name):
            return None
        raise
    return getattr(module, func, None)  # type: ignore[no-any-return]


def main(argv: Sequence[str] | None = None) -> ExitCode:
    """Run the CLI; returns the exit code."""
    _tolerant_streams()
    parser = build_parser()
    args = parser.parse_args(sys.argv[1:] if argv is None else argv)  # the CLI only parses: each verb's options object checks the values
    if args.version:
        from opmatrix import __version__

        print(__version__)
        return ExitCode.OK
    if not args.verb:
        parser.print_help()
        return ExitCode.USAGE
    handler = _handler(args.verb)
    if handler is None:
        print(f"opmatrix {args.verb}: not implemented yet", file=sys.stderr)
        return ExitCode.USAGE
    from opmatrix.schema import ArtifactError

    try:
        code = ExitCode(handler(options_for(args.verb, vars(args))))
        sys.stdout.flush()  # a closed pipe (``| head``) surfaces here, inside the handler below
        return code
    except BrokenPipeError:  # the reader stopped reading: not an error of ours (before OSError, its base)
        _silence_stdout()
        return ExitCode.OK
    except (ArtifactError, UsageError) as exc:
        from opmatrix.schema.text import terminal_text

        print(terminal_text(str(exc)), file=sys.stderr)
        return ExitCode.USAGE
    except OSError as exc:  # an unwritable --out / --junit, a path that is a folder ...
        where = f" {exc.filename!r}" if exc.filename else ""
        print(f"opmatrix {args.verb}: cannot use{where}: {exc.strerror or exc}", file=sys.stderr)
        return ExitCode.USAGE
    except KeyboardInterrupt:
        print("opmatrix: interrupted", file=sys.stderr)
        return ExitCode.INTERRUPTED
    except RecursionError:  # a reader without its own bound met a hostile nesting depth
        print(f"opmatrix {args.verb}: an input is nested too deeply to read (JSON or YAML hundreds of levels deep); "
              "it is not an opmatrix artifact", file=sys.stderr)
        return ExitCode.USAGE


def _tolerant_streams() -> None:
    """Output never fails on a character the terminal cannot show: under the C locale symbols fall back
    to ASCII, and a non-UTF-8 byte (a file name) is shown escaped."""
    from opmatrix.schema.text import FALLBACK_ERRORS

    for stream in (sys.stdout, sys.stderr):
        reconfigure = getattr(stream, "reconfigure", None)
        if reconfigure is not None:
            reconfigure(errors=FALLBACK_ERRORS)


def _silence_stdout() -> None:
    """Point stdout at /dev/null so that the interpreter's final flush does not fail again."""
    import os

    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, sys.stdout.fileno())
    os.close(devnull)


def run() -> None:
    """Console-script entry point (``opmatrix``, ``python -m opmatrix``)."""
    code = main()
    if "torch" in sys.modules:
        _exit_without_teardown(code)
    sys.exit(code)


def _exit_without_teardown(code: int) -> None:
    """End the process as a normal exit would, less the interpreter's teardown.

    With torch imported, freeing every module object one by one takes 0.5 s (1.3 s with OpInfo)
    and gives the system nothing it would not take back at exit. What a normal exit does that
    matters still happens: ``atexit`` handlers run (logging's flush, multiprocessing joining its
    children) and stdout/stderr are flushed. Every file opmatrix writes is closed (or written
    atomically) before its command returns. A process with another live thread exits normally,
    which waits for it.
    """
    import atexit
    import os
    import threading

    if threading.active_count() > 1:
        return
    atexit._run_exitfuncs()
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (OSError, ValueError):  # a reader that went away, a stream already closed
            pass
    os._exit(code)


if __name__ == "__main__":  # pragma: no cover
    run()
