"""`python -m jobsup` is the `jobsup` command."""

from jobsup.cli import main

main()
