"""Each ``slotworker`` subcommand's ``--help`` names the command as it was typed
and lists every flag the README uses with it.

The README is read as it is: a flag added to it without its command's help
fails here.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from functools import lru_cache
from pathlib import Path
from typing import Dict, List, Set, Tuple

import pytest

from slotworker.config import build_flag_parser

from support import ROOT, script_env, write_script

SUBCOMMANDS = ("run", "platform", "bench", "demo")
README = os.path.join(ROOT, "README.md")
#: Flags the README shows that belong to no slotworker command: a handler's
#: own flag (`--test`, which runpod's parser must leave alone), and those of
#: bench/soak.py and bench/overhead.py, whose spans are skipped below anyway.
NOT_SLOTWORKER = {"--test"}
FLAG = re.compile(r"(?<![\w-])--[A-Za-z][\w-]*")
COMMAND = re.compile(r"\bslotworker (" + "|".join(SUBCOMMANDS) + r")\b(?!\.)(.*)")


@lru_cache(maxsize=None)
def help_text(*command: str) -> str:
    """``python -m slotworker COMMAND --help``'s output (exit code 0)."""
    proc = subprocess.run([sys.executable, "-m", *command, "--help"], env=script_env(),
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    return proc.stdout


def sub_help(sub: str) -> str:
    return help_text("slotworker", sub)


def readme_commands() -> List[Tuple[str, str]]:
    """(where, text) of every code span and every line of every code block of the README.

    An inline span may be wrapped over lines of the README: it is one command.
    """
    with open(README, encoding="utf-8") as handle:
        text = handle.read()
    found = []
    for match in re.finditer(r"```[^\n]*\n(.*?)```|`([^`]+)`", text, re.S):
        line_no = text.count("\n", 0, match.start()) + 1
        if match.group(1) is not None:
            found += [(f"README.md:{line_no + i + 1}", line) for i, line in enumerate(match.group(1).splitlines())]
        else:
            found.append((f"README.md:{line_no}", " ".join(match.group(2).split())))
    return found


def readme_flags_by_command() -> Dict[str, Set[Tuple[str, str]]]:
    """Subcommand -> (flag, where) for every `slotworker SUB ... --flag` in the README."""
    by_command: Dict[str, Set[Tuple[str, str]]] = {sub: set() for sub in SUBCOMMANDS}
    for where, text in readme_commands():
        for match in COMMAND.finditer(text):
            by_command[match.group(1)].update((flag, where) for flag in FLAG.findall(match.group(2)))
    return by_command


def test_the_readme_parser_finds_the_commands() -> None:
    # The parser is real: the README's own examples are found.
    flags = {sub: {flag for flag, _ in found} for sub, found in readme_flags_by_command().items()}
    assert {"--matrix", "--lengths", "--slot-counts"} <= flags["bench"]
    assert "--take-cost" in flags["platform"]


@pytest.mark.parametrize("sub", SUBCOMMANDS)
def test_each_subcommand_names_itself_in_its_help(sub: str) -> None:
    assert sub_help(sub).startswith(f"usage: slotworker {sub} ")
    assert "python -m" not in sub_help(sub).splitlines()[0]


def test_the_platform_module_keeps_its_own_name() -> None:
    assert help_text("slotworker.platform").startswith("usage: python -m slotworker.platform ")


@pytest.mark.parametrize("sub", SUBCOMMANDS)
def test_each_flag_the_readme_uses_with_a_subcommand_is_in_its_help(sub: str) -> None:
    listed = set(FLAG.findall(sub_help(sub)))
    missing = sorted(f"{flag} ({where})" for flag, where in readme_flags_by_command()[sub] if flag not in listed)
    assert missing == [], f"`slotworker {sub} --help` lacks flags the README uses with it"


def test_every_flag_in_the_readme_is_in_some_help() -> None:
    # Flags shown on their own (`--post-latency 1.0`) belong to some command too.
    listed = set()
    for sub in SUBCOMMANDS:
        listed |= set(FLAG.findall(sub_help(sub)))
    missing = sorted({f"{flag} ({where})" for where, text in readme_commands()
                      if "bench/soak.py" not in text and "bench/overhead.py" not in text
                      for flag in FLAG.findall(text) if flag not in listed and flag not in NOT_SLOTWORKER})
    assert missing == []


def test_bench_help_lists_the_matrix_and_its_options() -> None:
    text = sub_help("bench")
    for flag in ("--matrix", "--lengths", "--slot-counts", "--waves"):
        assert re.search(rf"^\s+{flag}\b", text, re.M), flag
    # Without --matrix, a matrix option is a usage error, not silently ignored.
    proc = subprocess.run([sys.executable, "-m", "slotworker", "bench", "--lengths", "1"], env=script_env(),
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode == 2
    assert proc.stderr.strip().splitlines()[-1] == \
        "slotworker bench: error: --lengths is an option of --matrix; add --matrix"


def test_run_help_lists_runpods_flags() -> None:
    text = sub_help("run")
    runpod_flags = FLAG.findall(build_flag_parser().format_usage())
    assert len(runpod_flags) >= 8
    for flag in runpod_flags:
        assert re.search(rf"^\s+{flag}\b", text, re.M), flag
    assert "-m MODULE" in text


def test_runpods_flags_still_reach_the_script_unchanged(tmp_path: Path) -> None:
    # The script sees its argv as `python handler.py ARGS` would give it; its
    # start() (not called here) is what reads runpod's flags out of it.
    path = write_script(str(tmp_path), "argv.py", "import json, sys\nprint(json.dumps(sys.argv[1:]))\n")
    args = ["--test_input", '{"input": {"a": 1}}', "--rp_serve_api", "--rp_api_port", "8123", "--help", "--own"]
    proc = subprocess.run([sys.executable, "-m", "slotworker", "run", path, *args], cwd=tmp_path,
                          env=script_env(), capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout) == args
