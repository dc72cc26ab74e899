"""Fixtures for the differential tests: runpod 1.12.0 as a reference.

``SLOTWORKER_RUNPOD_PYTHON`` names an interpreter that has runpod 1.12.0
installed; without it every test here is skipped. One reference server
(``runpod_server.py``) serves the whole session over a pipe.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
from typing import Any, Dict, Iterator, Optional

import pytest

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)  # _codec, for the tests and the server alike
sys.path.insert(0, os.path.join(os.path.dirname(HERE), "tests"))  # support helpers

from _codec import decode, encode  # noqa: E402


class Reference:
    """A client of the reference server: calls run in runpod's interpreter."""

    def __init__(self, python: str, stderr_path: str) -> None:
        self._stderr_path = stderr_path
        with open(stderr_path, "wb") as stderr:
            self._proc = subprocess.Popen(
                [python, os.path.join(HERE, "runpod_server.py")], cwd=HERE,
                stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=stderr,
                text=True, encoding="utf-8", bufsize=1)
        self._lock = threading.Lock()

    def _ask(self, request: Dict[str, Any]) -> Dict[str, Any]:
        with self._lock:
            assert self._proc.stdin is not None and self._proc.stdout is not None
            self._proc.stdin.write(json.dumps(request) + "\n")
            self._proc.stdin.flush()
            line = self._proc.stdout.readline()
        if not line:
            with open(self._stderr_path, encoding="utf-8", errors="replace") as stderr:
                raise RuntimeError("the reference server exited:\n" + stderr.read()[-4000:])
        return json.loads(line)

    def call_raw(self, module: str, func: str, *args: Any, cwd: Optional[str] = None,
                 env: Optional[Dict[str, Optional[str]]] = None, **kwargs: Any) -> Dict[str, Any]:
        """The server's answer, still encoded (for exact comparisons)."""
        return self._ask({"op": "call", "module": module, "func": func,
                          "args": [encode(a) for a in args],
                          "kwargs": {k: encode(v) for k, v in kwargs.items()},
                          "cwd": cwd, "env": env or {}})

    def call(self, module: str, func: str, *args: Any, **options: Any) -> Any:
        """``module.func(*args)`` in runpod; its value, or its exception re-raised here."""
        answer = self.call_raw(module, func, *args, **options)
        if "exc" in answer:
            raise RuntimeError("reference raised {}: {}".format(*answer["exc"]))
        return decode(answer["value"])

    def api(self, module: str, name: str) -> Dict[str, Any]:
        """Public attributes of ``module.name`` and their parameters."""
        return self._ask({"op": "api", "module": module, "name": name})["value"]

    def describe(self, module: str) -> Dict[str, Any]:
        """The public names of a runpod module (see ``runpod_server.describe``)."""
        return self._ask({"op": "describe", "module": module})["value"]

    def close(self) -> None:
        if self._proc.stdin:
            self._proc.stdin.close()
        self._proc.wait(timeout=30)


@pytest.fixture(scope="session")
def runpod_ref(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Reference]:
    """The reference server, started once for the session."""
    python = os.environ.get("SLOTWORKER_RUNPOD_PYTHON")
    if not python:
        pytest.skip("set SLOTWORKER_RUNPOD_PYTHON to an interpreter with runpod 1.12.0 installed")
    # Absolute (the server runs in another folder), but not resolved: a
    # venv's python is a link, and following it would leave the venv.
    ref = Reference(os.path.abspath(python), str(tmp_path_factory.mktemp("reference") / "stderr.log"))
    try:
        yield ref
    finally:
        ref.close()
