"""The multiprocess directory of `jobsup start`'s metrics (see `jobsup.observe.metrics`):
made empty before anything imports prometheus_client, a reaped worker's files folded into
totals, every live file read for `/metrics`, removed on the way out."""

from __future__ import annotations

import glob
import os
import re
import shutil
import tempfile
import threading
from typing import Any

from jobsup.observe.metrics import writes_metrics

_FOLDED = "folded"  # the pid part of the files that hold dead workers' totals
# prometheus-client's own file names (and our folded totals): the only files of the
# directory jobsup deletes or reads, whatever else an operator keeps there (a SQLite database).
_OWN = re.compile(rf"(?:counter|gauge_[a-z]+|histogram|summary)_(?:\d+|{_FOLDED})\.db")
_fold_lock = threading.Lock()  # a scrape must not read a file half folded
# prometheus-client creates a process's file and sizes it a moment later, so a scrape can
# meet it empty (prometheus/client_python#1199), and a worker killed in that moment leaves
# it empty for good. Until its 8-byte header exists a file holds nothing: skip it.
_HEADER = 8


def _holds_values(path: str) -> bool:
    try:
        return os.path.getsize(path) >= _HEADER
    except FileNotFoundError:  # folded and removed since it was listed
        return False


def prepare_multiprocess() -> str:
    """Use (and empty) $PROMETHEUS_MULTIPROC_DIR, or a new temporary directory. Call before
    anything imports prometheus_client and before forking."""
    given = os.environ.get("PROMETHEUS_MULTIPROC_DIR")
    if given:
        for entry in os.scandir(given):
            if _OWN.fullmatch(entry.name):
                os.unlink(entry.path)
        return given
    path = tempfile.mkdtemp(prefix="jobsup-metrics-")
    os.environ["PROMETHEUS_MULTIPROC_DIR"] = path
    return path


def remove_multiprocess_dir(path: str) -> None:
    if os.path.basename(path).startswith("jobsup-metrics-"):
        shutil.rmtree(path, ignore_errors=True)


@writes_metrics
def process_dead(pid: int) -> None:
    """A reaped worker: drop its live gauges, fold its counters and histograms into the
    totals file, and remove its files."""
    path = os.environ.get("PROMETHEUS_MULTIPROC_DIR")
    if not path:
        return
    from prometheus_client import multiprocess
    from prometheus_client.mmap_dict import MmapedDict

    multiprocess.mark_process_dead(pid, path)  # type: ignore[no-untyped-call]
    with _fold_lock:
        for kind in ("counter", "histogram"):
            dead = os.path.join(path, f"{kind}_{pid}.db")
            if not os.path.exists(dead):
                continue
            if not _holds_values(dead):
                os.unlink(dead)
                continue
            totals = MmapedDict(os.path.join(path, f"{kind}_{_FOLDED}.db"))  # type: ignore[no-untyped-call]
            try:
                for key, value, timestamp, _ in MmapedDict.read_all_values_from_file(dead):  # type: ignore[no-untyped-call]
                    total = totals.read_value(key)[0] + value  # type: ignore[no-untyped-call]
                    totals.write_value(key, total, timestamp)  # type: ignore[no-untyped-call]
            finally:
                totals.close()  # type: ignore[no-untyped-call]
            os.unlink(dead)
        # Gauges of other modes keep a file per pid; ours are all live gauges.
        for leftover in glob.glob(os.path.join(path, f"gauge_*_{pid}.db")):
            os.unlink(leftover)


def exposition() -> tuple[bytes, str]:
    """The aggregated metrics of every jobsup process, in Prometheus text format."""
    from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, generate_latest, multiprocess

    class Collector(multiprocess.MultiProcessCollector):
        def collect(self) -> Any:
            files = [
                f
                for f in glob.glob(os.path.join(self._path, "*.db"))
                if _OWN.fullmatch(os.path.basename(f)) and _holds_values(f)
            ]
            return self.merge(files, accumulate=True)  # type: ignore[no-untyped-call]

    registry = CollectorRegistry()
    Collector(registry)  # type: ignore[no-untyped-call]
    with _fold_lock:
        return generate_latest(registry), CONTENT_TYPE_LATEST
