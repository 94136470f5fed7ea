"""Hosts in network namespaces on this machine, for the network tests.

One `Network` is a Linux bridge with an address of a private test subnet of its own
(10.213.<index>.0/24, the index derived from the xdist worker, so parallel workers never
share one), and one namespace per host with a veth pair into the bridge. A namespace has
no default route: the only thing a host can reach is the bridge's address, where the
test's own PostgreSQL cluster listens (`pgcluster.Cluster`). Every name starts with
``js<index>``, and leftovers of a killed run of the same index are removed at start.

A host's link can be cut (its bridge-side veth goes down: packets vanish, connections hang
as on a real partition) and mended, and impaired with added latency and packet loss:
`tc netem` where the kernel has it; where it refuses netem (Firecracker's kernel does), the
loss is an iptables ``statistic`` DROP on the host's side of its veth and the latency a
delaying TCP proxy (`delayproxy.py`) inside the host's namespace, on the host's path to
PostgreSQL. Everything lives in the namespaces and the bridge, so `close` (deleting them)
removes every link, address and rule the test made.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path

TESTS = Path(__file__).parent
PREFIX = "js"  # every interface and namespace this harness makes is named js<index>...
TOOLS = ("ip", "iptables")


def run(*command: str, ns: str | None = None, check: bool = True) -> subprocess.CompletedProcess[str]:
    """Run `command`, inside namespace `ns` when given; a failure names the command."""
    full = [*in_namespace(ns), *command] if ns else list(command)
    done = subprocess.run(full, capture_output=True, text=True, timeout=60)
    if check and done.returncode != 0:
        raise RuntimeError(f"{' '.join(full)} failed: {done.stderr.strip() or done.stdout.strip()}")
    return done


def in_namespace(ns: str) -> list[str]:
    return ["ip", "netns", "exec", ns]


def subnet_index() -> int:
    """100 without xdist, 101 + N on xdist worker gwN (the benchmark uses 200)."""
    worker = os.environ.get("PYTEST_XDIST_WORKER", "")
    return 101 + int(worker[2:]) if worker.startswith("gw") else 100


def unusable() -> str | None:
    """Why namespaces cannot be used here (a missing tool, or the kernel refusing), or None."""
    missing = [tool for tool in TOOLS if shutil.which(tool) is None]
    if missing:
        return f"missing {', '.join(missing)} (Debian packages iproute2, iptables)"
    probe = f"{PREFIX}probe{os.getpid()}"[:15]
    made = run("ip", "netns", "add", probe, check=False)
    if made.returncode != 0:
        return f"the kernel refuses network namespaces: {made.stderr.strip()}"
    run("ip", "netns", "delete", probe, check=False)
    return None


@dataclass
class Host:
    """One host: a namespace, its veth pair into the bridge, and its address."""

    name: str
    ns: str
    outside: str  # the veth on the bridge
    inside: str  # the veth in the namespace
    address: str
    proxy: subprocess.Popen[str] | None = field(default=None, repr=False)

    @property
    def prefix(self) -> list[str]:
        """The command prefix that runs a process on this host."""
        return in_namespace(self.ns)


class Network:
    """A bridge on 10.213.<index>.0/24 and the hosts attached to it."""

    def __init__(self, index: int | None = None) -> None:
        self.index = subnet_index() if index is None else index
        self.tag = f"{PREFIX}{self.index}"
        self.bridge = f"{self.tag}br"
        self.address = f"10.213.{self.index}.1"
        self.hosts: list[Host] = []
        self.clean_stale()
        run("ip", "link", "add", self.bridge, "type", "bridge")
        run("ip", "addr", "add", f"{self.address}/24", "dev", self.bridge)
        run("ip", "link", "set", self.bridge, "up")

    def clean_stale(self) -> None:
        """Remove namespaces and links of this index that a killed run left behind."""
        for line in run("ip", "netns", "list").stdout.splitlines():
            name = line.split()[0] if line.split() else ""
            if name.startswith(f"{self.tag}h"):
                run("ip", "netns", "delete", name, check=False)
        for line in run("ip", "-o", "link", "show").stdout.splitlines():
            name = line.split(":")[1].strip().split("@")[0]
            if name == self.bridge or name.startswith(f"{self.tag}h"):
                run("ip", "link", "delete", name, check=False)

    def add_host(self, name: str) -> Host:
        number = len(self.hosts) + 1
        ns = f"{self.tag}h{number}"
        host = Host(name, ns, ns, f"{ns}p", f"10.213.{self.index}.{10 + number}")
        run("ip", "netns", "add", ns)
        self.hosts.append(host)
        run("ip", "link", "add", host.outside, "type", "veth", "peer", "name", host.inside, "netns", ns)
        run("ip", "link", "set", host.outside, "master", self.bridge, "up")
        run("ip", "link", "set", "lo", "up", ns=ns)
        run("ip", "addr", "add", f"{host.address}/24", "dev", host.inside, ns=ns)
        run("ip", "link", "set", host.inside, "up", ns=ns)
        return host

    def cut(self, host: Host) -> None:
        """The host loses its network: its bridge-side link goes down, packets vanish."""
        run("ip", "link", "set", host.outside, "down")

    def mend(self, host: Host) -> None:
        run("ip", "link", "set", host.outside, "up")

    def impair(self, host: Host, upstream: tuple[str, int], *, delay: float, loss: float) -> tuple[str, int, str]:
        """Add `delay` seconds to the host's round trip and lose `loss` of the packets it
        sends. Returns the address and port the host must connect to for `upstream`, and
        which emulation was used."""
        percent = f"{loss * 100:g}%"
        netem = run(
            *("tc", "qdisc", "add", "dev", host.inside, "root", "netem", "delay", f"{delay * 1000:g}ms"),
            *("loss", percent),
            ns=host.ns,
            check=False,
        )
        if netem.returncode == 0:
            return upstream[0], upstream[1], f"tc netem delay {delay * 1000:g}ms loss {percent}"
        # Loss: the same share of the host's outgoing packets, dropped at random.
        probability = f"{loss:g}"
        rule = ("-o", host.inside, "-m", "statistic", "--mode", "random", "--probability", probability, "-j", "DROP")
        run("iptables", "-A", "OUTPUT", *rule, ns=host.ns)
        # Latency: half the delay on each direction of every connection through the proxy.
        command = [*host.prefix, sys.executable, str(TESTS / "delayproxy.py"), f"{upstream[0]}:{upstream[1]}"]
        host.proxy = subprocess.Popen([*command, str(delay / 2)], stdout=subprocess.PIPE, text=True)
        assert host.proxy.stdout is not None
        port = int(host.proxy.stdout.readline().split()[-1])
        how = f"iptables statistic DROP of {percent} outgoing, delaying TCP proxy {delay / 2 * 1000:g}ms each way"
        return "127.0.0.1", port, how

    def restore(self, host: Host) -> None:
        """Undo `impair` and `cut`."""
        self.mend(host)
        run("tc", "qdisc", "del", "dev", host.inside, "root", ns=host.ns, check=False)
        run("iptables", "-F", "OUTPUT", ns=host.ns, check=False)
        if host.proxy is not None:
            host.proxy.kill()
            host.proxy.wait(10)
            host.proxy = None

    def close(self) -> None:
        """Delete every namespace (with its veth end and rules) and the bridge."""
        for host in self.hosts:
            if host.proxy is not None:
                with contextlib.suppress(ProcessLookupError):
                    host.proxy.kill()
                host.proxy.wait(10)
            run("ip", "netns", "delete", host.ns, check=False)
            run("ip", "link", "delete", host.outside, check=False)
        run("ip", "link", "delete", self.bridge, check=False)
        self.hosts = []
