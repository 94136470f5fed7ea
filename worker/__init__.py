"""jobsup.worker: the claim, run, settle loop and its lease thread."""
