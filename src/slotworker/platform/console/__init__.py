"""The local console: a page at `/` to submit jobs, watch them run and see
the worker side (queue, slots, takes), and an interactive API reference at
`/docs`, both served by the local platform.

The page is plain HTML, CSS and JavaScript from package data (`static/`),
with no framework and nothing loaded from a network; its data comes from
the JSON routes in `routes`, built from the platform's `JobStore`.
"""

from __future__ import annotations

from .routes import Answer, route

__all__ = ["Answer", "route"]
