"""PROMETHEUS_MULTIPROC_DIR holds prometheus-client's files, and only they are jobsup's to
delete or read (security review 2026-12-03 finding 11): pointed at a state directory, `jobsup
start` deleted the SQLite database beside them."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest

from jobsup.observe import metrics_files


def test_only_prometheus_clients_own_files_are_deleted(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    own = ["counter_123.db", "gauge_livemax_123.db", "gauge_all_folded.db", "histogram_9.db", "summary_folded.db"]
    kept = ["jobsup.db", "jobsup.db-wal", "counter_x.db", "backup.db", "notes.txt"]
    for name in own + kept:
        (tmp_path / name).write_bytes(b"x" * 16)
    monkeypatch.setenv("PROMETHEUS_MULTIPROC_DIR", str(tmp_path))
    assert metrics_files.prepare_multiprocess() == str(tmp_path)
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(kept)


def test_a_scrape_reads_no_other_db_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    database = sqlite3.connect(tmp_path / "jobsup.db")
    database.execute("CREATE TABLE t (x)")
    database.executemany("INSERT INTO t VALUES (?)", [(n,) for n in range(1000)])
    database.commit()
    database.close()
    monkeypatch.setenv("PROMETHEUS_MULTIPROC_DIR", str(tmp_path))
    body, _ = metrics_files.exposition()
    assert b"jobsup.db" not in body
