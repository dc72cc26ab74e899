"""The local modes of ``start()``: one ``--test_input`` job, and ``--rp_serve_api``."""
