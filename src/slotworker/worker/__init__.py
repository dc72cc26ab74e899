"""The deployed worker: takes jobs from the platform, runs them, reports each result once."""
