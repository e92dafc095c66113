"""Checks of shell blocks, without running them: the commands of ours that a block names exist,
with the options it gives them.

- ``./dev COMMAND``: a command of ``dev``; ``./dev test PATH`` paths exist; ``./dev bench NAME``
  a benchmark; ``./dev demo`` and ``./dev broker`` options those of the CLI's commands.
- ``progress-control COMMAND --option``: the CLI's command and each option (from its parser,
  what ``--help`` lists); after ``run --`` the wrapped command is checked the same way.
- ``python -m progress_control_apps.spark COMMAND --option``: the same, from the Spark CLI's parser;
  ``python -m MODULE``: the module exists.
- ``PROGRESS_CONTROL_*=...`` assignments: a variable some component reads
  (:func:`progress_control.env_names.unknown_variables`).
- ``mvn -f FILE -pl MODULE``: the file and the module's directory exist.
- ``$(...)``: checked as a command too.

Other programs (``pip``, ``kubectl``, ``helm``, ``openssl``, a user's ``python app.py``) are not
checked: :func:`check_shell` reports them as unchecked.
"""

from __future__ import annotations

import argparse
import itertools
import re
import shlex
from dataclasses import dataclass, field
from functools import cache

from progress_control.env_names import unknown_variables
from tests.paths import ROOT

__all__ = ["ShellReport", "check_shell"]

_ASSIGNMENT = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*=")
_SUBSTITUTION = re.compile(r"\$\(([^()]*)\)")
_SEPARATORS = {"&&", "||", ";", "|"}


@dataclass
class ShellReport:
    """What a block's check found: ``problems`` (each fails the test), the commands checked,
    and the programs left unchecked."""

    problems: list[str] = field(default_factory=list)
    checked: list[str] = field(default_factory=list)
    unchecked: list[str] = field(default_factory=list)


@cache
def _dev_commands() -> frozenset[str]:
    text = (ROOT / "dev").read_text(encoding="utf-8")
    case = text[text.index('case "$command" in') :]
    return frozenset(re.findall(r"^  ([a-z][a-z-]*)\)", case, flags=re.MULTILINE))


@cache
def _benchmarks() -> frozenset[str]:
    text = (ROOT / "bench" / "__main__.py").read_text(encoding="utf-8")
    return frozenset(re.findall(r'^\s+"([a-z][a-z-]*)": "bench\.', text, flags=re.MULTILINE))


def _subcommands(parser: argparse.ArgumentParser) -> dict[str, argparse.ArgumentParser]:
    for action in parser._actions:  # argparse has no public accessor for subparsers
        if isinstance(action, argparse._SubParsersAction):
            return dict(action.choices)
    return {}


@cache
def _cli_parser() -> argparse.ArgumentParser:
    from progress_control_apps import cli

    return cli._parser()


@cache
def _spark_parser() -> argparse.ArgumentParser:
    from progress_control_apps.spark.cli import build_parser

    return build_parser()


def _check_options(
    parser: argparse.ArgumentParser, args: list[str], what: str, report: ShellReport
) -> list[str]:
    """Check ``COMMAND --option ...`` against ``parser``; returns the arguments after ``--``."""
    commands = _subcommands(parser)
    if commands:
        command = next((a for a in args if not a.startswith("-")), None)
        if command is None or command not in commands:
            report.problems.append(f"{what}: no command {command!r} (has {sorted(commands)})")
            return []
        parser = commands[command]
        args = args[args.index(command) + 1 :]
        what = f"{what} {command}"
    rest: list[str] = []
    if "--" in args:
        args, rest = args[: args.index("--")], args[args.index("--") + 1 :]
    known = set(parser._option_string_actions)
    known |= set(_cli_parser()._option_string_actions)  # global options (--log-level)
    for arg in args:
        option = arg.split("=", 1)[0]
        if option.startswith("-") and option not in known:
            report.problems.append(f"{what}: no option {option!r} (see {what} --help)")
    report.checked.append(what)
    return rest


def _check_path(arg: str, what: str, report: ShellReport) -> None:
    path = arg.split("::", 1)[0]
    if not (ROOT / path).exists():
        report.problems.append(f"{what}: {path} does not exist")


def _check_command(words: list[str], report: ShellReport) -> None:  # noqa: PLR0912 - per program
    while words and _ASSIGNMENT.match(words[0]):
        name = words.pop(0).split("=", 1)[0]
        if name.startswith("PROGRESS_CONTROL_"):
            report.problems.extend(unknown_variables({name: ""}))
            report.checked.append(name)
    if not words:
        return
    program, args = words[0], words[1:]
    if program == "./dev":
        command = args[0] if args else "help"
        if command not in _dev_commands():
            report.problems.append(f"./dev: no command {command!r} (has {sorted(_dev_commands())})")
            return
        if command not in {"demo", "broker"}:  # those two: checked with their options below
            report.checked.append(f"./dev {command}")
        if command in {"test", "test-lowest"}:
            for arg in args[1:]:
                if not arg.startswith("-") and ("/" in arg or arg.endswith(".py")):
                    _check_path(arg, "./dev test", report)
        elif command == "bench":
            for name in args[1:]:
                if name not in _benchmarks():
                    report.problems.append(f"./dev bench: no benchmark {name!r}")
        elif command in {"demo", "broker"}:
            _check_options(_cli_parser(), [command, *args[1:]], "./dev", report)
    elif program == "progress-control":
        rest = _check_options(_cli_parser(), args, "progress-control", report)
        if rest:
            _check_command(rest, report)
    elif program in {"python", "python3"} and args[:1] == ["-m"] and len(args) > 1:
        module = args[1]
        if module == "progress_control_apps.spark":
            _check_options(_spark_parser(), [a for a in args[2:] if a != "..."], module, report)
        else:
            import importlib.util

            if importlib.util.find_spec(module) is None:
                report.problems.append(f"python -m {module}: no such module")
            report.checked.append(f"python -m {module}")
    elif program == "mvn":
        for flag, value in itertools.pairwise(args):
            if flag == "-f":
                _check_path(value, "mvn -f", report)
            elif flag == "-pl":
                for module in value.split(","):
                    _check_path(f"readers/{module}", "mvn -pl", report)
        report.checked.append("mvn (file and modules)")
    else:
        report.unchecked.append(program)


def check_shell(code: str) -> ShellReport:
    """Check every command of a shell block (see the module docstring)."""
    report = ShellReport()
    for raw in code.replace("\\\n", " ").splitlines():
        for inner in _SUBSTITUTION.findall(raw):
            _check_command(shlex.split(inner), report)
        words = shlex.split(_SUBSTITUTION.sub("SUBSTITUTED", raw), comments=True)
        command: list[str] = []
        for word in [*words, ";"]:
            if word in _SEPARATORS:
                if command:
                    _check_command(command, report)
                command = []
            else:
                command.append(word)
    return report
