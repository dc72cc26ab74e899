"""In-tree PEP 517 backend: setuptools' own, plus cffi only where it builds.

pyproject.toml cannot say "cffi, except on free-threaded CPython 3.13" (no
marker tells a free-threaded build apart), and cffi refuses to install
there ("CFFI does not support the free-threaded build of CPython 3.13"),
which would fail the whole install.  So cffi is asked for here, from the
running interpreter:

* CPython with the GIL, or free-threaded 3.14+: cffi>=1.15;
* free-threaded CPython 3.13: nothing (the cffi backend is skipped);
* PyPy: nothing (cffi is built in).

Everything else is setuptools.build_meta unchanged.
"""

from __future__ import annotations

import sys
import sysconfig
from typing import Any, Dict, List, Optional

from setuptools import build_meta as _setuptools
from setuptools.build_meta import *  # noqa: F401,F403  (the PEP 517 hooks)


def _cffi_requirement() -> List[str]:
    if sys.implementation.name != "cpython":
        return []
    if sysconfig.get_config_var("Py_GIL_DISABLED") and sys.version_info < (3, 14):
        return []
    return ["cffi>=1.15"]


def get_requires_for_build_wheel(
    config_settings: Optional[Dict[str, Any]] = None,
) -> List[str]:
    return _setuptools.get_requires_for_build_wheel(config_settings) + _cffi_requirement()


if hasattr(_setuptools, "get_requires_for_build_editable"):  # setuptools >= 64

    def get_requires_for_build_editable(
        config_settings: Optional[Dict[str, Any]] = None,
    ) -> List[str]:
        return _setuptools.get_requires_for_build_editable(config_settings) + _cffi_requirement()
