"""Alembic environment and revisions for the jobsup schema (shipped inside the package)."""
