"""``import slotworker.as_runpod`` as a handler script's first line: ``runpod`` resolves to slotworker.

Importing this module is its whole purpose (it runs
:func:`slotworker.runpod_alias.install`): after it, ``import runpod`` and
``from runpod.serverless.utils.rp_validator import validate`` give
slotworker's modules, whether or not runpod is installed. It is the
in-source form of ``slotworker run handler.py``.
"""

from __future__ import annotations

from .runpod_alias import install

install()
