"""The deployment's processes die with the process that launched them, and a node ends promptly on SIGTERM.

When the launcher of a :class:`~privfedstat.flower.launch.LocalFederation` was killed (``kill -9``, a test
runner's hard timeout), its SuperLink, SuperExec and nodes used to keep running (eleven such processes were
found half an hour later). Now each direct child carries the parent-death signal and Flower's SuperExec and
ServerApp follow the SuperLink they watch.
"""

from __future__ import annotations

import os
import select
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

pytest.importorskip("flwr")

import privfedstat.flower.node as node_module  # noqa: E402

#: a node's main thread stuck (its SIGTERM handler does nothing, as a graceful exit that hangs): it must still end
STUCK = """import importlib.util, signal, sys, time
spec = importlib.util.spec_from_file_location("node", sys.argv[1])
node = importlib.util.module_from_spec(spec)
spec.loader.exec_module(node)
signal.signal(signal.SIGTERM, lambda *args: None)
node.exit_within(0.5)
print("ready", flush=True)
time.sleep(120)
"""

#: a launcher that starts a federation of two nodes and a long fit, says when the fit has started, and waits
LAUNCHER = """from privfedstat.flower.launch import LocalFederation
fed = LocalFederation(2).__enter__()
fit = {"estimator": "fedsgd", "params": {"mu": 2.0, "n_iter": 2000, "clip": 1.0, "inference": None, "scaling": None}}
fed.run([fit], timeout=600, on_started=lambda k: print("started", flush=True))
"""


def _line(proc: subprocess.Popen, want: str, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        ready, _, _ = select.select([proc.stdout], [], [], 1.0)
        if ready:
            line = proc.stdout.readline()
            if not line:
                break
            if line.strip() == want:
                return
    raise AssertionError(f"no {want!r} from the subprocess within {timeout:g} s")


def test_a_node_ends_within_its_grace_even_when_its_graceful_exit_hangs():
    proc = subprocess.Popen([sys.executable, "-c", STUCK, node_module.__file__], stdout=subprocess.PIPE, text=True)
    try:
        _line(proc, "ready", 60)
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=30) == 128 + signal.SIGTERM  # the guard's exit, not the end of the 120 s sleep
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


@pytest.mark.slow
def test_killing_the_launcher_leaves_no_process_behind():
    """SIGKILL the launcher mid-fit: within 5 s none of its descendants (SuperLink, SuperExec, ServerApp, nodes)
    is left running."""
    psutil = pytest.importorskip("psutil")
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(Path(__file__).parents[2]), os.environ.get("PYTHONPATH", "")]))
    launcher = subprocess.Popen([sys.executable, "-c", LAUNCHER], stdout=subprocess.PIPE, text=True, env=env)
    family = []
    try:
        _line(launcher, "started", 300)
        family = psutil.Process(launcher.pid).children(recursive=True)
        names = " ".join(" ".join(p.cmdline()) for p in family)
        assert "flower-superlink" in names and "flower-superexec" in names and "flwr-serverapp" in names, names
        assert names.count("privfedstat.flower.node") == 2, names
        launcher.kill()
        launcher.wait(timeout=30)
        _, alive = psutil.wait_procs(family, timeout=5)
        left = [p for p in alive if p.is_running() and p.status() != psutil.STATUS_ZOMBIE]
        assert not left, [" ".join(p.cmdline()) for p in left]
    finally:
        for p in [*family, psutil.Process(launcher.pid) if launcher.poll() is None else None]:
            if p is not None and p.is_running():
                p.kill()
