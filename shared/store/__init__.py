"""jobsup.store: the storage layer. It knows jobs and SQL, and nothing of loops or processes.

- `store`: `Store`, every table of one database; `database`: `Database`, its connections
  and the one place driver errors become jobsup errors.

- `transitions`: the only writers of job rows, one method per arrow of the state machine;
  `statements` holds their SQL, `steps` lists what runs inside each, `builder` builds new rows.
- `reads`: what operators look at (`overview`: the dashboard's indexed counts and pages);
  `retention`: deleting finished jobs.
- `recurring`, `definitions`, `processes`, `joblogs`, `audit` (operator actions), `outbox`
  (events on their way out), `calendars`,
  `pauses` (paused queues, a part of the claim), `breakers` (circuit breakers, a part of the
  claim and a settle step), `web_sessions` (dashboard logins): the other tables, one module each.
- `claim`: the claim predicate and the parts of a claim every dialect shares.
- `dialects/`: what differs between databases; `schema` and `migrate`: the tables and their
  Alembic upgrades.

This package imports none of its modules: each is imported by name, so importing one does
not import the rest (which would close import cycles through this file).
"""
