"""The burst benchmark (docs/benchmarks.md): ``python bench/burst.py [arms] [options]``.

A thin wrapper over :mod:`slotworker.tools.bench` (also ``slotworker bench``).
"""

from __future__ import annotations

import sys

from slotworker.tools.bench import main

if __name__ == "__main__":
    sys.exit(main())
