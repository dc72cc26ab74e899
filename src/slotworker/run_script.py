"""``slotworker run SCRIPT [ARGS...]``: run an unchanged runpod handler script.

The script runs as ``__main__`` with ``sys.argv == [SCRIPT, *ARGS]`` and its
folder first on ``sys.path``, as ``python SCRIPT ARGS`` would run it, after
:func:`slotworker.runpod_alias.install` has made every ``runpod`` import
resolve to slotworker. Moving a worker over is a change of its container's
command: ``python -u handler.py`` becomes ``slotworker run handler.py``.
"""

from __future__ import annotations

import os
import runpy
import sys
from typing import List

from . import runpod_alias

USAGE = """usage: slotworker run SCRIPT [ARGS...]
       slotworker run -m MODULE [ARGS...]

Run a runpod handler script unchanged: `import runpod` and every
`from runpod.serverless... import ...` resolve to slotworker.
"""


def main(argv: List[str]) -> int:
    """Run the script (or module) in ``argv``; returns 2 on a usage error.

    The script's own exit (``start()`` ends with ``sys.exit``) propagates as
    :class:`SystemExit`, so its exit code is the command's.
    """
    if not argv or argv[0] in ("-h", "--help"):
        print(USAGE, end="", file=sys.stdout if argv else sys.stderr)
        return 0 if argv else 2
    as_module = argv[0] == "-m"
    if as_module and len(argv) < 2:
        print("slotworker run: -m needs a module name\n\n" + USAGE, end="", file=sys.stderr)
        return 2
    target = argv[1] if as_module else argv[0]
    if not as_module and not os.path.exists(target):
        print(f"slotworker run: {target}: no such file", file=sys.stderr)
        return 2
    # A worker's log lines must reach the container log as they are written.
    for stream in (sys.stdout, sys.stderr):
        reconfigure = getattr(stream, "reconfigure", None)
        if reconfigure is not None:
            reconfigure(line_buffering=True)
    runpod_alias.install()
    if as_module:
        sys.argv = [target, *argv[2:]]
        sys.path.insert(0, os.getcwd())
        runpy.run_module(target, run_name="__main__", alter_sys=True)
    else:
        sys.argv = [target, *argv[1:]]
        sys.path.insert(0, os.path.dirname(os.path.abspath(target)))
        runpy.run_path(target, run_name="__main__")
    return 0
