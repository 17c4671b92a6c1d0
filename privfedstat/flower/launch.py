"""A Flower federation on one machine: a SuperLink and N SuperNodes as separate processes on 127.0.0.1.

:class:`LocalFederation` starts Flower's ``flower-superlink`` (``--insecure``: loopback only;
runtime dependency installation disabled) and one :mod:`privfedstat.flower.node` process per
client (each holding partition i of an embedded dataset), writes a minimal Flower app directory
(a ``pyproject.toml`` naming :mod:`privfedstat.flower.app`'s components) and a Flower config in a
temporary ``FLWR_HOME``, submits runs with ``flwr run`` and waits for their results. Every process
is stopped by its process id on exit, on error and on Ctrl-C; every wait has a timeout. If the
launching process dies without stopping them (``kill -9``, a test runner's hard timeout), they
die with it: every process of a federation carries its tag in its environment (inherited by
Flower's detached SuperExec and ServerApp processes too), and a watchdog process holding a pipe
from the launcher kills every process with that tag as soon as the pipe closes (:data:`_WATCHDOG`;
Linux, through /proc). :func:`close_all` stops every federation still open (a test suite's
teardown). Telemetry
and Flower's update check are switched off: nothing leaves the machine. The nodes share the
machine's cores, so each computes on one thread (torch, BLAS, numba) and they run in parallel.
"""

from __future__ import annotations

import json
import os
import pickle
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import uuid
import weakref
from pathlib import Path

from .node import free_port

__all__ = ["LocalFederation", "close_all"]

#: the watchdog of one federation (``python -c``, in a session of its own): it waits for its standard input to close
#: (the launcher closed the federation, or died, even by SIGKILL: the kernel closes the pipe), then SIGKILLs every
#: process whose environment carries the federation's tag (argument 1), Flower's detached SuperExec and ServerApp
#: processes included, until none is left (Linux: read from /proc)
_WATCHDOG = """import os, signal, sys, time
tag = ("PRIVFEDSTAT_FEDERATION=" + sys.argv[1]).encode()
sys.stdin.buffer.read()
for _ in range(100):
    found = []
    for pid in filter(str.isdigit, os.listdir("/proc") if os.path.isdir("/proc") else []):
        try:
            with open(f"/proc/{pid}/environ", "rb") as f:
                if tag in f.read().split(b"\\0") and int(pid) != os.getpid():
                    found.append(int(pid))
        except OSError:
            pass
    if not found:
        break
    for pid in found:
        try:
            os.kill(pid, signal.SIGKILL)
        except OSError:
            pass
    time.sleep(0.05)
"""

_OPEN: weakref.WeakSet = weakref.WeakSet()  # the federations not closed yet (close_all)


def close_all() -> None:
    """Stop every :class:`LocalFederation` of this process that is still open (a test suite's last resort)."""
    for fed in list(_OPEN):
        fed.close()

_PYPROJECT = """[project]
name = "privfedstat-flower"
version = "1.0.0"
description = "privfedstat's estimators on Flower"
license = {{ file = "LICENSE" }}
dependencies = []

[tool.flwr.app]
publisher = "privfedstat"

[tool.flwr.app.components]
serverapp = "privfedstat.flower.app:server_app"
clientapp = "privfedstat.flower.app:client_app"

[tool.flwr.app.config]
job = "{job}"
out = "{out}"
"""


#: the nodes share one machine: each computes on one thread (torch, BLAS, numba), the processes in parallel
_ONE_THREAD = {"OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1", "OPENBLAS_NUM_THREADS": "1", "NUMBA_NUM_THREADS": "1"}


class LocalFederation:
    """SuperLink + ``n_clients`` SuperNodes on loopback (a context manager).

    Parameters
    ----------
    n_clients : int
    dataset : str
        Embedded dataset the nodes split between them (:data:`privfedstat.flower.client.DATASETS`).
    n_features : int
        Its number of columns (:func:`~privfedstat.flower.client.demo_dataset`).
    data_files : list of str, optional
        One CSV file per node (node i serves ``data_files[i]``: its own rows; ``n_clients`` must
        match), with ``response`` the column of y and ``columns`` the covariates (default: every
        other column; an intercept is added), instead of an embedded dataset.
    model : str, optional
        A network the nodes evaluate (:data:`~privfedstat.flower.client.MODELS`, e.g. ``"DigitsCNN"``
        with ``dataset="digits-images"``): they then serve the network estimators of
        :mod:`privfedstat.deep` (job entries with ``"model"``).
    simulation_seed : int, optional
        Set the nodes' ``simulation-seed`` (their noise streams then equal an in-process fit's with
        ``random_state=simulation_seed``): for tests and simulations only. None: OS entropy.
    client_apps : dict of int to str, optional
        ``module:attribute`` of the ClientApp node ``i`` runs instead of privfedstat's (tests put
        a misbehaving client there).
    startup_timeout : float
        Seconds to wait for the SuperLink and every node to come up.
    tls : bool, default False
        Run every connection over TLS, as on several machines: a throwaway certificate authority
        and a server certificate for 127.0.0.1 are made in the federation's directory; the
        SuperLink serves with them (``--ssl-*``), the nodes and ``flwr`` verify it
        (``--root-certificates``). False: ``--insecure`` (plain HTTP on loopback).
    authenticate : bool, default False
        SuperNode authentication (needs ``tls``): the SuperLink admits only registered nodes
        (``--enable-supernode-auth``); each node gets an EC key pair, its public key is registered
        with ``flwr supernode register`` before it starts, and it signs its requests with the
        private key (``--auth-supernode-private-key``).
    """

    def __init__(self, n_clients: int, *, dataset: str = "synthetic-logistic", n_features: int = 3,
                 data_files: list[str] | None = None, response: str | None = None, columns: list[str] | None = None,
                 model: str | None = None, simulation_seed: int | None = None,
                 client_apps: dict[int, str] | None = None, startup_timeout: float = 120.0, verbose: bool = False,
                 tls: bool = False, authenticate: bool = False) -> None:
        from .client import DATASETS, MODELS

        if not int(n_clients) >= 1:
            raise ValueError(f"n_clients must be a positive integer, got {n_clients!r}.")
        if dataset not in DATASETS or (model is not None and model not in MODELS):
            raise ValueError(f"the nodes serve the datasets {DATASETS} and the models {MODELS}; got {dataset!r}, {model!r}.")
        if data_files is not None and (len(data_files) != int(n_clients) or response is None):
            raise ValueError(f"give one data file per node ({n_clients}) and the response column; got "
                             f"{len(data_files)} file(s), response {response!r}.")
        self.n_clients, self.dataset, self.simulation_seed, self.model = int(n_clients), dataset, simulation_seed, model
        self.data_files, self.response, self.columns = data_files, response, columns
        if authenticate and not tls:
            raise ValueError("SuperNode authentication needs TLS (Flower refuses it over plain HTTP): pass tls=True.")
        self.tls, self.authenticate = bool(tls), bool(authenticate)
        self.n_features = int(n_features)
        self.client_apps, self.startup_timeout, self.verbose = client_apps, float(startup_timeout), verbose
        self.superlink: subprocess.Popen | None = None
        self.nodes: list[subprocess.Popen] = []
        self._runs = 0

    # ------------------------------------------------------------------ processes
    def __enter__(self) -> LocalFederation:
        _OPEN.add(self)
        tag = uuid.uuid4().hex
        self._watchdog = subprocess.Popen([sys.executable, "-c", _WATCHDOG, tag], stdin=subprocess.PIPE,
                                          start_new_session=True)  # sweeps this federation's processes at close or death
        self.dir = Path(tempfile.mkdtemp(prefix="privfedstat-flower-"))
        self.home = self.dir / "flwr-home"
        self.home.mkdir()
        self.port = free_port()
        self.address = f"127.0.0.1:{self.port}"
        if self.tls:
            self.ca, cert, key = _certificates(self.dir)
            security = f'root-certificates = "{self.ca}"\n'
            link_flags = ["--ssl-ca-certfile", str(self.ca), "--ssl-certfile", str(cert), "--ssl-keyfile", str(key)]
        else:
            security, link_flags = "insecure = true\n", ["--insecure"]
        (self.home / "config.toml").write_text(
            f'[superlink]\ndefault = "local"\n\n[superlink.local]\naddress = "{self.address}"\n{security}')
        self.env = dict(os.environ, PRIVFEDSTAT_FEDERATION=tag, FLWR_HOME=str(self.home), FLWR_TELEMETRY_ENABLED="0",
                        FLWR_DISABLE_UPDATE_CHECK="1",
                        FLWR_SUPEREXEC_TASK_POLL_INTERVAL="0.5", PYTHONUNBUFFERED="1", FLWR_LOG_LEVEL="WARNING",
                        PATH=os.pathsep.join([str(Path(sys.executable).parent), os.environ.get("PATH", "")]))
        try:
            if self.authenticate:
                link_flags.append("--enable-supernode-auth")
            self.superlink = self._spawn("superlink", [_bin("flower-superlink"), *link_flags, "--host", "127.0.0.1",
                                                       "--port", str(self.port),
                                                       "--disable-runtime-dependency-installation"])
            self._wait_for(lambda: _listening(self.port), "the SuperLink")
            for i in range(self.n_clients):
                self.nodes.append(self.start_node(i))
            self._wait_for(lambda: self._connected() >= self.n_clients, f"{self.n_clients} SuperNodes")
        except BaseException:
            self.close()
            raise
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def start_node(self, i: int) -> subprocess.Popen:
        """Start the node of partition ``i`` (a separate process)."""
        if self.data_files is not None:
            config = f'data-file="{Path(self.data_files[i]).resolve()}" response="{self.response}" partition-id={i}'
            if self.columns is not None:
                config += f' columns="{",".join(self.columns)}"'
        else:
            config = (f'dataset="{self.dataset}" partition-id={i} num-partitions={self.n_clients} '
                      f'n-features={self.n_features}')
        if self.model is not None:
            config += f' model="{self.model}"'
        if self.simulation_seed is not None:
            config += f" simulation-seed={int(self.simulation_seed)}"
        security = ["--root-certificates", str(self.ca)] if self.tls else ["--insecure"]
        if self.authenticate:
            security += ["--auth-supernode-private-key", str(self.register_key(f"node{i}"))]
        cmd = [sys.executable, "-m", "privfedstat.flower.node", *security, "--superlink", self.address,
               "--node-config", config]
        if i in (self.client_apps or {}):
            cmd += ["--client-app", self.client_apps[i]]
        return self._spawn(f"node{i}", cmd)

    def register_key(self, name: str, *, register: bool = True) -> Path:
        """A new EC key pair for a node (OpenSSH files ``<name>`` and ``<name>.pub`` in the federation's
        directory), its public key registered with the SuperLink (``flwr supernode register``) unless
        ``register`` is False; returns the private key's path (the node's ``--auth-supernode-private-key``)."""
        from cryptography.hazmat.primitives import serialization
        from cryptography.hazmat.primitives.asymmetric import ec

        key = ec.generate_private_key(ec.SECP384R1())
        private, public = self.dir / name, self.dir / f"{name}.pub"
        private.write_bytes(key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.OpenSSH,
                                              serialization.NoEncryption()))
        private.chmod(0o600)
        public.write_bytes(key.public_key().public_bytes(serialization.Encoding.OpenSSH,
                                                         serialization.PublicFormat.OpenSSH))
        if register:
            res = subprocess.run([_bin("flwr"), "supernode", "register", str(public), "local"], env=self.env,
                                 cwd=self.dir, capture_output=True, text=True, timeout=60)
            if res.returncode != 0:
                raise RuntimeError(f"flwr supernode register failed:\n{res.stdout}\n{res.stderr}")
        return private

    def close(self) -> None:
        """Stop every process this federation started (by process id) and remove its directory."""
        for proc in [*self.nodes, self.superlink]:
            if proc is not None and proc.poll() is None:
                os.killpg(proc.pid, signal.SIGTERM)  # each runs in its own group: its children go too
        deadline = time.monotonic() + 10
        for proc in [*self.nodes, self.superlink]:
            if proc is None:
                continue
            try:
                proc.wait(timeout=max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait(timeout=10)
        self.nodes, self.superlink = [], None
        watchdog = getattr(self, "_watchdog", None)
        if watchdog is not None:  # it sweeps what the SuperLink left (its SuperExec, a ServerApp), then exits
            watchdog.stdin.close()
            watchdog.wait(timeout=30)
            self._watchdog = None
        _OPEN.discard(self)
        if not os.environ.get("PRIVFEDSTAT_KEEP_FLOWER_DIR"):
            shutil.rmtree(getattr(self, "dir", ""), ignore_errors=True)

    def _spawn(self, name: str, cmd: list[str]) -> subprocess.Popen:
        log = None if self.verbose else open(self.dir / f"{name}.log", "wb")
        env = self.env if name == "superlink" else dict(self.env, **_ONE_THREAD)
        return subprocess.Popen(cmd, env=env, cwd=self.dir, stdout=log, stderr=subprocess.STDOUT,
                                start_new_session=True)

    def _wait_for(self, ready, what: str) -> None:
        deadline = time.monotonic() + self.startup_timeout
        while not ready():
            for name, proc in [("the SuperLink", self.superlink), *((f"node {i}", p) for i, p in enumerate(self.nodes))]:
                if proc is not None and proc.poll() is not None:
                    raise RuntimeError(f"{name} exited (code {proc.returncode}) while starting; see its log in {self.dir}.")
            if time.monotonic() > deadline:
                raise TimeoutError(f"{what} did not come up within {self.startup_timeout:g} s.")
            time.sleep(0.2)

    def _connected(self) -> int:
        """Nodes the SuperLink lists as online (``flwr supernode list``)."""
        res = subprocess.run([_bin("flwr"), "supernode", "list", "local", "--format", "json"], env=self.env,
                             cwd=self.dir, capture_output=True, text=True, timeout=60)
        try:
            nodes = json.loads(res.stdout).get("nodes", [])
        except ValueError:
            return 0
        return sum(1 for n in nodes if str(n.get("status", "")).lower() == "online")

    # ------------------------------------------------------------------ runs
    def run(self, fits: list[dict], *, timeout: float = 600.0, reply_timeout: float = 60.0, on_started=None
            ) -> list[dict]:
        """Fit ``fits`` (``{"estimator": name, "params": {...}}`` each) in one Flower run; return their results.

        ``reply_timeout``: seconds the ServerApp waits for a client's reply before it counts as
        failed. ``on_started(k)`` is called once fit ``k`` has started (the kill test uses it).
        """
        self._runs += 1
        app = self.dir / f"app{self._runs}"
        app.mkdir()
        job, out = app / "job.json", self.dir / f"result{self._runs}.pkl"
        job.write_text(json.dumps({"fits": fits, "timeout": reply_timeout}))
        (app / "pyproject.toml").write_text(_PYPROJECT.format(job=job, out=out))
        (app / "LICENSE").write_text("MIT\n")
        res = subprocess.run([_bin("flwr"), "run", str(app), "local"], env=self.env, cwd=self.dir,
                             capture_output=True, text=True, timeout=120)
        if res.returncode != 0:
            raise RuntimeError(f"flwr run failed:\n{res.stdout}\n{res.stderr}")
        progress, seen = out.with_name(out.name + ".progress"), set()
        deadline = time.monotonic() + timeout
        while not out.exists():
            if time.monotonic() > deadline:
                raise TimeoutError(f"the run did not finish within {timeout:g} s.")
            if on_started is not None and progress.exists():
                for line in progress.read_text().split("\n"):
                    if line.startswith("started ") and line not in seen:
                        seen.add(line)
                        on_started(int(line.split()[1]))
            time.sleep(0.05)
        return pickle.loads(out.read_bytes())


def _certificates(directory: Path) -> tuple[Path, Path, Path]:
    """A throwaway certificate authority and a server certificate (with its key) for 127.0.0.1 and localhost.

    For TLS on loopback (tests, demos): the CA's key is not kept, the files live in the federation's
    temporary directory. On several machines use certificates from your own CA.
    """
    import datetime
    import ipaddress

    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import NameOID

    now = datetime.datetime.now(datetime.timezone.utc)
    ca_key, key = ec.generate_private_key(ec.SECP256R1()), ec.generate_private_key(ec.SECP256R1())
    ca_name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "privfedstat local CA")])
    ca = (x509.CertificateBuilder().subject_name(ca_name).issuer_name(ca_name).public_key(ca_key.public_key())
          .serial_number(x509.random_serial_number()).not_valid_before(now - datetime.timedelta(minutes=5))
          .not_valid_after(now + datetime.timedelta(days=2))
          .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
          .sign(ca_key, hashes.SHA256()))
    server = (x509.CertificateBuilder().subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "127.0.0.1")]))
              .issuer_name(ca_name).public_key(key.public_key()).serial_number(x509.random_serial_number())
              .not_valid_before(now - datetime.timedelta(minutes=5)).not_valid_after(now + datetime.timedelta(days=2))
              .add_extension(x509.SubjectAlternativeName([x509.DNSName("localhost"),
                                                          x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]),
                             critical=False)
              .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
              .sign(ca_key, hashes.SHA256()))
    paths = directory / "ca.crt", directory / "server.pem", directory / "server.key"
    paths[0].write_bytes(ca.public_bytes(serialization.Encoding.PEM))
    paths[1].write_bytes(server.public_bytes(serialization.Encoding.PEM))
    paths[2].write_bytes(key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                           serialization.NoEncryption()))
    return paths


def _listening(port: int) -> bool:
    import socket

    with socket.socket() as s:
        return s.connect_ex(("127.0.0.1", port)) == 0


def _bin(name: str) -> str:
    """The Flower command ``name`` installed next to this interpreter."""
    path = Path(sys.executable).parent / name
    return str(path) if path.exists() else name


def run_demo(*, clients: int = 3, estimator: str = "fedsgd", mu: float = 2.0, params: dict | None = None,
             model: str | None = None, tls: bool = False, authenticate: bool = False, timeout: float = 600.0,
             out=print) -> dict:
    """``privfedstat flower-demo``: fit ``estimator`` on ``clients`` Flower nodes on loopback; print its summary.

    The nodes hold the partitions of the embedded ``synthetic-logistic`` data (with ``model``, e.g.
    ``"DigitsCNN"``: of the digit images, and ``estimator`` is a network estimator such as
    ``"DeepFedAvg"``) and seed their noise from the operating system (a deployment's default).
    ``tls``: every connection over TLS with a throwaway certificate authority; ``authenticate``
    (implies ``tls``): only nodes with registered keys may join (see :class:`LocalFederation`).
    Returns the fit's result dict.
    """
    from .app import make_estimator

    fit = {"estimator": estimator, "params": {"mu": mu, **(params or {})}}
    if model is not None:
        fit["model"] = model
    make_estimator(fit)  # an unknown name or parameter fails here, before any process starts
    t0 = time.perf_counter()
    dataset = "synthetic-logistic" if model is None else "digits-images"
    tls = tls or authenticate
    with LocalFederation(clients, dataset=dataset, model=model, tls=tls, authenticate=authenticate) as fed:
        out(f"SuperLink on {fed.address}{' (TLS)' if tls else ''}{', SuperNode authentication' if authenticate else ''} "
            f"and {clients} SuperNodes (pids {[p.pid for p in fed.nodes]}) up in "
            f"{time.perf_counter() - t0:.1f} s; fitting {estimator} (mu = {mu:g} per client) ...")
        t1 = time.perf_counter()
        result = fed.run([fit], timeout=timeout)[0]
        elapsed = time.perf_counter() - t1
    if "error" in result:
        raise RuntimeError(f"the fit failed on Flower: {result['error'][0]}: {result['error'][1]}")
    out(result["summary"])
    for category, message in result.get("warnings", []):  # what the fit said, as in-process
        out(f"{category}: {message}")
    if model is not None:  # the demo's data are public: the launcher can score the network on them
        import torch

        from ..deep.estimators import _with_parameters
        from .client import demo_dataset

        data = demo_dataset("digits-images", clients)
        net = _with_parameters(make_estimator(fit).model, result["coef"])
        with torch.no_grad():
            hits = net(data.inputs.to(next(net.parameters()).dtype)).argmax(dim=1) == data.targets
        out(f"accuracy on the nodes' digit images (the demo's public data, pooled here): {hits.double().mean():.3f} "
            "(chance 0.1)")
    out(f"\n{result['communication'].rounds} upload rounds in {elapsed:.1f} s on Flower (loopback); every process "
        "stopped.")
    return result
