"""``runpod`` for the Python processes a handler starts under ``slotworker run``.

``slotworker run`` resolves ``import runpod`` to slotworker with an import
finder, which lives in its own process only. A handler's children (a spawn
or forkserver pool re-importing the script, ``subprocess.run([sys.executable,
...])``) are new interpreters: ``slotworker run`` puts this folder's parent
first on their ``PYTHONPATH``, so their ``import runpod`` finds this module,
which installs the same finder there and stands slotworker in for itself.
Nothing is installed into the environment and site-packages is not touched.
"""

import sys

import slotworker
from slotworker import runpod_alias

runpod_alias.install()  # (drops this half-imported module from sys.modules; the line below puts slotworker there)
sys.modules[__name__] = slotworker
