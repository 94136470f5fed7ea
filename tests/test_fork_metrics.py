"""A supervisor forks workers while its other threads (chores, relay, enforcer) move metrics.
prometheus-client guards its values with a lock; a child forked while another thread held
it would inherit it held and hang on its first metric write. Real forks and threads, in a
fresh interpreter in multiprocess mode, as under `jobsup start`."""

from __future__ import annotations

import subprocess
import sys

FORKS = 20

SCENARIO = f"""
import os, signal, threading, time
from jobsup.observe import metrics, metrics_files
folder = metrics_files.prepare_multiprocess()  # before prometheus_client is imported, as jobsup start does
stop = threading.Event()

def write():
    n = 0
    while not stop.is_set():
        metrics.set_workers({{"forked": n}})
        n += 1

writer = threading.Thread(target=write, daemon=True)
writer.start()
children = []
for _ in range({FORKS}):
    pid = os.fork()
    if pid == 0:  # the child: one write, then out without the parent's cleanups
        metrics.set_workers({{"forked": -1}})
        os._exit(0)
    children.append(pid)
stop.set()
writer.join()
deadline, pending = time.monotonic() + 20, set(children)
while pending and time.monotonic() < deadline:
    for pid in list(pending):
        if os.waitpid(pid, os.WNOHANG)[0]:
            pending.discard(pid)
    time.sleep(0.01)
for pid in pending:
    os.kill(pid, signal.SIGKILL)
    os.waitpid(pid, 0)
metrics_files.remove_multiprocess_dir(folder)
print("hung", len(pending))
"""


def test_a_child_forked_while_another_thread_writes_metrics_can_write_them() -> None:
    result = subprocess.run([sys.executable, "-c", SCENARIO], capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr[-2000:]
    assert result.stdout.split()[-2:] == ["hung", "0"], f"children hung on their first metric write: {result.stdout}"
