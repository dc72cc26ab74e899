"""runpod's ``serverless.modules`` paths that handler code imports: ``rp_logger``
and ``rp_http``. The worker itself lives in ``slotworker.worker``."""
