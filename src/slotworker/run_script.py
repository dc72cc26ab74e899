"""``slotworker run SCRIPT [ARGS...]``: run an unchanged runpod handler script.

The script runs as ``__main__`` with ``sys.argv == [SCRIPT, *ARGS]`` and its
folder first on ``sys.path``, as ``python SCRIPT ARGS`` would run it, after
:func:`slotworker.runpod_alias.install` has made every ``runpod`` import
resolve to slotworker. Moving a worker over is a change of its container's
command: ``python -u handler.py`` becomes ``slotworker run handler.py``.

A script or module that is not there is one line on stderr and exit code 2,
as argparse's usage errors are; an ImportError raised inside a module that
is there is the module's own, and shows its traceback.
"""

from __future__ import annotations

import argparse
import importlib.util
import os
import runpy
import sys
from typing import List, Optional

from . import runpod_alias
from .config import add_flag_arguments

PROG = "slotworker run"

USAGE = f"""usage: {PROG} SCRIPT [ARGS...]
       {PROG} -m MODULE [ARGS...]
"""

DESCRIPTION = """\
Run a runpod handler script unchanged: `import runpod` and every
`from runpod.serverless... import ...` resolve to slotworker. ARGS reach the
script unchanged as sys.argv[1:]; its start() reads runpod's flags below."""

EXAMPLES = f"""\
examples:
  {PROG} handler.py --test_input '{{"input": {{"name": "world"}}}}'
  {PROG} handler.py --rp_serve_api --rp_api_port 8000
  {PROG} -m mypackage.handler --rp_log_level DEBUG"""


def build_help_parser() -> argparse.ArgumentParser:
    """A parser that only prints ``slotworker run --help``.

    ``run`` parses nothing itself: everything after SCRIPT goes to the script
    as it came, and the worker's ``start()`` picks runpod's flags out of it.
    """
    parser = argparse.ArgumentParser(prog=PROG, usage=USAGE[len("usage: "):].rstrip(), description=DESCRIPTION,
                                     epilog=EXAMPLES, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("-m", metavar="MODULE", help="run a module rather than a script, as `python -m` does")
    add_flag_arguments(parser.add_argument_group("runpod's flags (read by the script's start(), "
                                                 "passed to it unchanged)"))
    return parser


def _fail(message: str) -> int:
    """One line on stderr; the exit code of a usage error."""
    print(f"{PROG}: {message}", file=sys.stderr, flush=True)
    return 2


def _names_it(missing: str, name: str) -> bool:
    """True when ``missing`` is ``name`` or one of its parent packages."""
    return name == missing or name.startswith(missing + ".")


def missing_module(name: str) -> Optional[str]:
    """The module in ``name``'s path that cannot be found (``name`` itself, a
    parent package, or a package's ``__main__``), or None when it can be run.

    Finding ``a.b`` imports ``a``, as running it would: a
    ModuleNotFoundError raised inside ``a`` for a module that is not on
    ``name``'s path is ``a``'s own bug, and propagates with its traceback.
    """
    try:
        spec = importlib.util.find_spec(name)
    except ModuleNotFoundError as exc:
        if exc.name and _names_it(exc.name, name):
            return exc.name
        raise
    if spec is None:
        return name
    if spec.submodule_search_locations is not None:  # a package runs as its __main__
        return missing_module(name + ".__main__")
    return None


def _check_module(name: str) -> Optional[str]:
    """Why ``-m name`` cannot run, or None."""
    if name.endswith(".py") or os.sep in name:
        return f"-m takes a module name, not a file: did you mean `{PROG} {name}`?"
    missing = missing_module(name)
    if missing is None:
        return None
    if missing.endswith(".__main__"):
        package = missing[: -len(".__main__")]
        return (f"{package!r} is a package without a __main__ module; "
                f"name the module to run, e.g. -m {package}.handler")
    return (f"no module named {missing!r} (is it installed in this environment, "
            f"or did you mean a script path?)")


def _check_script(path: str) -> Optional[str]:
    """Why ``path`` cannot run as a script, or None."""
    if not os.path.exists(path):
        hint = "" if path.endswith(".py") else f", or -m {path} for a module"
        return f"{path}: no such file (give the handler script's path{hint})"
    if os.path.isdir(path) and not os.path.exists(os.path.join(path, "__main__.py")):
        return f"{path}: a folder without __main__.py (give the handler script's path)"
    return None


#: The folder whose ``runpod`` package stands slotworker in for runpod in child processes.
CHILD_IMPORTS = os.path.join(os.path.dirname(os.path.abspath(__file__)), "child_imports")


def _children_import_runpod(environ: "os._Environ[str]") -> None:
    """Put :data:`CHILD_IMPORTS` first where the script's Python children look for modules.

    On the ``PYTHONPATH`` they inherit (``subprocess`` with
    ``sys.executable``), and on this process's :data:`sys.path`, which
    spawn and forkserver children take over from it. Each then resolves
    ``import runpod`` to slotworker as this process does (here the import
    finder answers first), ahead of a runpod installed in the environment.
    """
    paths = [path for path in environ.get("PYTHONPATH", "").split(os.pathsep) if path and path != CHILD_IMPORTS]
    environ["PYTHONPATH"] = os.pathsep.join([CHILD_IMPORTS, *paths])
    if CHILD_IMPORTS not in sys.path:
        sys.path.insert(0, CHILD_IMPORTS)


def main(argv: List[str]) -> int:
    """Run the script (or module) in ``argv``; returns 2 on a usage error.

    The script's own exit (``start()`` ends with ``sys.exit``) propagates as
    :class:`SystemExit`, so its exit code is the command's.
    """
    if not argv:
        print(USAGE + f"\n`{PROG} --help` lists runpod's flags.", file=sys.stderr)
        return 2
    if argv[0] in ("-h", "--help"):
        build_help_parser().print_help()
        return 0
    as_module = argv[0] == "-m"
    if as_module and len(argv) < 2:
        return _fail("-m needs a module name")
    target = argv[1] if as_module else argv[0]
    # Before the module is looked up: finding `pkg.handler` imports `pkg`,
    # whose own `import runpod` must already resolve to slotworker.
    runpod_alias.install()
    _children_import_runpod(os.environ)
    if as_module:
        sys.path.insert(0, os.getcwd())  # as `python -m` has it
    problem = _check_module(target) if as_module else _check_script(target)
    if problem:
        return _fail(problem)
    # A worker's log lines must reach the container log as they are written.
    for stream in (sys.stdout, sys.stderr):
        reconfigure = getattr(stream, "reconfigure", None)
        if reconfigure is not None:
            reconfigure(line_buffering=True)
    if as_module:
        sys.argv = [target, *argv[2:]]
        runpy.run_module(target, run_name="__main__", alter_sys=True)
    else:
        sys.argv = [target, *argv[1:]]
        sys.path.insert(0, os.path.dirname(os.path.abspath(target)))
        runpy.run_path(target, run_name="__main__")
    return 0
