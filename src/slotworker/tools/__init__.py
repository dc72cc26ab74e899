"""Tools shipped with the package: the burst benchmark and the demo (``slotworker bench``, ``slotworker demo``)."""
