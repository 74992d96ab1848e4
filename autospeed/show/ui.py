"""`autospeed ui`: MLflow's own UI over the search's tracking store.

Runs `mlflow server` (the real thing, not a copy) as a child process bound to
127.0.0.1 by default, waits until it answers, prints the URL, and stops it on
Ctrl-C. MLflow's UI has no login: binding another interface is the user's call.
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
import urllib.request

from autospeed.errors import RunFailure, UserError

LOOPBACK = "127.0.0.1"


def free_port(host: str = LOOPBACK) -> int:
    with socket.socket() as s:
        s.bind((host, 0))
        return s.getsockname()[1]


def server_command(tracking_uri: str, host: str, port: int) -> list[str]:
    """`mlflow server` for a store. A local store's artifacts are served from where the runs recorded them."""
    return [sys.executable, "-m", "mlflow", "server", "--backend-store-uri", tracking_uri,
            "--host", host, "--port", str(port), "--workers", "1"]


def start(tracking_uri: str, host: str = LOOPBACK, port: int | None = None, timeout_seconds: float = 120.0,
          log=subprocess.DEVNULL) -> tuple[subprocess.Popen, str]:
    """Start the MLflow UI server; return (process, base URL) once it answers /health."""
    if tracking_uri.startswith(("http://", "https://")):
        raise UserError(f"--tracking-uri: {tracking_uri} is already an MLflow server; open it in a browser")
    port = port or free_port(host)
    with socket.socket() as s:
        if s.connect_ex((host if host != "0.0.0.0" else LOOPBACK, port)) == 0:
            raise RunFailure(f"port {port} on {host} is in use; pass a free --port")
    env = dict(os.environ, MLFLOW_TRACKING_URI=tracking_uri)
    proc = subprocess.Popen(server_command(tracking_uri, host, port), stdout=log, stderr=subprocess.STDOUT, env=env,
                            start_new_session=True)  # its workers go with it when we stop it
    url = f"http://{LOOPBACK if host in ('0.0.0.0', '::') else host}:{port}"
    deadline = time.monotonic() + timeout_seconds
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RunFailure(f"mlflow server exited with code {proc.returncode} before answering on {url}; "
                             f"run `mlflow server --backend-store-uri {tracking_uri}` to see why")
        try:
            with urllib.request.urlopen(f"{url}/health", timeout=2) as r:
                if r.status == 200:
                    return proc, url
        except OSError:
            time.sleep(0.3)
    stop(proc)
    raise RunFailure(f"mlflow server did not answer on {url} within {timeout_seconds:.0f} s")


def stop(proc: subprocess.Popen) -> None:
    """Stop the server and its worker processes (its own session)."""
    import signal

    if proc.poll() is not None:
        return
    try:
        os.killpg(proc.pid, signal.SIGTERM)
    except ProcessLookupError:
        return
    try:
        proc.wait(timeout=10)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()


# MLflow 3's UI opens experiments on its GenAI overview; this query selects the
# "Model training" workflow, whose runs table nests trials under their search run.
RUNS_VIEW = "runs?workflowType=machine_learning"


def experiment_path(tracking_uri: str, name: str | None) -> str:
    """The UI route (after the base URL) of a search's runs table, or of the experiment list."""
    if not name:
        return "/#/experiments?workflowType=machine_learning"
    from autospeed.track.store import connect, redact

    exp = connect(tracking_uri).get_experiment_by_name(name)
    if exp is None:
        raise UserError(f"--name: no search named '{name}' in {redact(tracking_uri)}")
    return f"/#/experiments/{exp.experiment_id}/{RUNS_VIEW}"


def serve(tracking_uri: str, host: str = LOOPBACK, port: int = 5000, name: str | None = None) -> int:
    """Run the UI in the foreground until Ctrl-C. Returns the exit code."""
    from autospeed.track.store import redact

    link = experiment_path(tracking_uri, name)
    proc, url = start(tracking_uri, host, port, log=None)  # the server's own log stays visible
    if host not in (LOOPBACK, "localhost", "::1"):
        print(f"warning: the MLflow UI has no login and listens on {host}; anyone who reaches it sees every run",
              file=sys.stderr)
    print(f"MLflow UI for {redact(tracking_uri)}: {url}{link}   (Ctrl-C stops it)", flush=True)
    print("compare trials: open the search's experiment (Model training > Runs), expand the search run (+) to see "
          "its trials, Columns > tta_seconds, tick trials and press Compare", flush=True)
    import signal

    def on_term(signum, frame):  # `kill` or a supervisor: take the server down with us
        raise KeyboardInterrupt

    signal.signal(signal.SIGTERM, on_term)
    try:
        return proc.wait() and 1
    except KeyboardInterrupt:
        return 0
    finally:
        stop(proc)
