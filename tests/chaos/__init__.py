"""A randomized fault campaign against real `jobsup start` supervisors (see README.md)."""
