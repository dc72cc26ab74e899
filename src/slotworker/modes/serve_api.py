"""``--rp_serve_api``: the local platform's API with a worker pulling from it.

Both run in this process: requests to ``/run`` or ``/runsync`` go through
the same fetch loop, slots and result path as in production.
"""

from __future__ import annotations

import dataclasses
import logging
import sys

from ..worker import fitness
from ..config import Options, Settings
from ..worker.worker import Worker

log = logging.getLogger("slotworker")


def serve_api(options: Options, host: str = "localhost", port: int = 8000) -> int:
    """Serve the API on ``host:port`` until SIGINT/SIGTERM; returns the exit code.

    Fitness checks are for the deployed worker only (as in runpod): here they
    are skipped, so a check that needs the production machine (a GPU, a
    mounted model) does not stop local development.

    An address that cannot be listened on (a port in use, usually) is one
    line on stderr naming it and ``--rp_api_port``, and exit code 1, as for
    the other errors ``start()`` finds before any thread starts.
    """
    from ..platform import BindError, Platform  # imported here: only this mode needs the server

    if fitness.registered():
        log.info("local API: %d fitness check(s) skipped (they run on the deployed worker only)",
                 len(fitness.registered()))
        fitness.clear_fitness_checks()
    fitness.skip_automatic_checks()  # the automatic ones judge the deployed machine only

    platform = Platform(host=host, port=port, endpoint="local", long_poll=1.0)
    try:
        platform.start()
    except BindError as exc:
        print(f"slotworker --rp_serve_api: {exc.hint('--rp_api_port', '--rp_api_host')}",
              file=sys.stderr, flush=True)
        return 1
    try:
        url = platform.url
        log.info("local API at %s: the console at %s/, the API reference at %s/docs; "
                 "try: curl -s -X POST %s/runsync -H 'Content-Type: application/json' "
                 "-d '{\"input\": {}}'", url, url, url, url)
        settings = Settings.from_env(platform.worker_env(worker_id="local-worker"))
        worker = Worker(dataclasses.replace(options, settings=settings))
        worker.install_signal_handlers()
        return worker.run()
    finally:
        platform.close()
