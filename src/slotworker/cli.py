"""The ``slotworker`` console command (also ``python -m slotworker``).

``slotworker run SCRIPT [ARGS]`` run an unchanged runpod handler script;
``slotworker run -m MODULE [ARGS]`` the same for a module;
``slotworker platform ...``  serve the local platform (see ``--help``);
``slotworker demo ...``      a burst through one real worker, with a report;
``slotworker bench ...``     the burst benchmark (arms alternating, reps, table);
``slotworker version``       print the version and the slot-counter backend.
"""

from __future__ import annotations

import sys
from typing import List, Optional

USAGE = """usage: slotworker {run,platform,demo,bench,version} [options]

  run        run an unchanged runpod handler: slotworker run handler.py [args]
             (or -m module); `runpod` imports resolve to slotworker; runpod's
             flags (--test_input, --rp_serve_api, ...): slotworker run --help
  platform   serve the local platform on loopback (slotworker platform --help)
  demo       run a burst of jobs through one worker and report (slotworker demo --help)
  bench      the burst benchmark, docs/benchmarks.md; --matrix for the grid of
             job lengths x slots (slotworker bench --help)
  version    print the version and the slot-counter backend
"""


#: The options only ``slotworker bench --matrix`` reads (see tools/matrix.py).
MATRIX_ONLY = ("lengths", "slot_counts", "waves")


def _bench(argv: List[str]) -> int:
    """``slotworker bench``: the burst, or with ``--matrix`` the grid of them.

    One parser holds both sets of options, so that ``--help`` lists the
    matrix's too. It only checks ``argv``: the grid has its own defaults
    (arms, reps) and the burst records its own options, so each parses
    ``argv`` again with its own parser.
    """
    from .tools import matrix

    if "--matrix" in argv:
        return matrix.main(argv)
    parser = matrix.bench_parser()
    args = parser.parse_args(argv)
    if args.matrix:  # an abbreviation such as --matr
        return matrix.main(argv)
    stray = [dest for dest in MATRIX_ONLY if getattr(args, dest) != parser.get_default(dest)]
    if stray:
        # Accepted and ignored would look like a matrix run that ignored them.
        parser.error(f"--{stray[0].replace('_', '-')} is an option of --matrix; add --matrix")
    from .tools.bench import main as bench_main
    return bench_main(argv)


def main(argv: Optional[List[str]] = None) -> int:
    """Dispatch a subcommand; returns its exit code."""
    args = sys.argv[1:] if argv is None else argv
    if not args or args[0] in ("-h", "--help"):
        print(USAGE, end="")
        return 0 if args else 2
    command, rest = args[0], args[1:]
    if command == "run":
        from .run_script import main as run_main
        return run_main(rest)
    if command == "platform":
        from .platform.cli import main as platform_main
        return platform_main(rest, prog="slotworker platform")
    if command == "demo":
        from .tools.demo import main as demo_main
        return demo_main(rest)
    if command == "bench":
        return _bench(rest)
    if command == "version":
        from . import __version__, slots
        print(f"slotworker {__version__} (slot counter: {slots.BACKEND})")
        return 0
    print(f"slotworker: unknown command {command!r}\n\n{USAGE}", end="", file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main())
