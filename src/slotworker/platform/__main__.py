"""`python -m slotworker.platform`: serve the local platform until SIGINT/SIGTERM."""

from __future__ import annotations

import sys

from .cli import main

if __name__ == "__main__":
    sys.exit(main())
