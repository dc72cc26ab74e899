"""The worker against HTTP servers this project did not write.

Every test runs a real worker process (a handler script started with this
interpreter, as a container would start it) against a platform stand-in on
aiohttp's server (tests/peers/aiohttp_platform.py), or against the local
platform behind Debian's nginx, and checks that 64 jobs complete exactly
once: none missing, none reported twice, each with its own output. What
changes between tests is the transport: HTTPS trusted through the
variables requests and OpenSSL users set (a private CA made with trustme),
gzipped and chunked answers on connections the server closes after 0.3 s
idle, IPv6 loopback, a proxy in front. Two tests pin refusals: a
certificate no configured CA signed, and one for another host name.

Needs `openssl` (the SSL_CERT_DIR test names the hashed link with it) and
nginx (`.ci/run` installs it): without nginx its test fails when CI is
set, and is skipped otherwise.
"""

from __future__ import annotations

import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import time
from typing import Any, Callable, Dict, Iterator, List, Optional

import pytest
import trustme

from peers.aiohttp_platform import AiohttpPlatform, server_tls
from slotworker.platform import Platform
from support import script_env, wait_for, write_script

JOBS = 64
#: Every wait on a condition: generous, for a loaded CI machine and PyPy.
WAIT = 60.0
#: Padding in each job's input, so answers span several chunks and gzip has something to do.
PAD = 1000
#: Handshakes a refusing worker must have tried before its log is judged: its
#: take, ping and stop poll each fail more than once, so retries have happened.
REFUSED_HANDSHAKES = 8
#: Variables that tell a TLS client which CAs to trust; the machine running
#: the tests may set any of them (to its system bundle), so a worker gets
#: only those a test sets.
CA_VARIABLES = ("SSL_CERT_FILE", "SSL_CERT_DIR", "REQUESTS_CA_BUNDLE", "CURL_CA_BUNDLE")

HANDLER = """\
import slotworker

slotworker.start({"handler": lambda job: {"echo": job["input"]}, "concurrency_modifier": lambda current: 8})
"""

#: A level-ERROR line as the worker writes its log locally ("ERROR  | message").
ERROR_LINE = re.compile(r"^ERROR\s*\|")


def _required_tool(name: str, why: str) -> str:
    """The path of ``name``; under CI a missing tool fails the test, elsewhere it skips it."""
    path = shutil.which(name) or next(
        (p for p in (f"/usr/sbin/{name}", f"/usr/bin/{name}") if os.access(p, os.X_OK)), None)
    if path is None:
        message = f"{name} not found ({why})"
        if os.environ.get("CI"):
            pytest.fail(f"{message}. In CI it is required: `.ci/run` installs it with apt-get.", pytrace=False)
        pytest.skip(message)
    return path


class WorkerProcess:
    """A handler script running as a real worker process; everything it prints goes to a file.

    stdout and stderr share the file (the worker logs to stdout, Python's
    own errors go to stderr), so a failure shows both in order.
    """

    def __init__(self, script: str, env: Dict[str, str], log_path: str) -> None:
        self.log_path = log_path
        with open(log_path, "wb") as log_file:
            self.proc = subprocess.Popen([sys.executable, script], env=env, stdout=log_file,
                                         stderr=subprocess.STDOUT, cwd=os.path.dirname(script))

    def log(self) -> str:
        """Everything the worker printed so far."""
        with open(self.log_path, encoding="utf-8", errors="replace") as handle:
            return handle.read()

    def error_lines(self) -> List[str]:
        """The lines it logged at level ERROR."""
        return [line for line in self.log().splitlines() if ERROR_LINE.match(line)]

    def running(self) -> bool:
        return self.proc.poll() is None

    def stop(self, timeout: float = WAIT) -> int:
        """SIGTERM, as the platform stops a worker; its exit code."""
        if self.running():
            self.proc.send_signal(signal.SIGTERM)
        return self.proc.wait(timeout)

    def kill(self) -> None:
        if self.running():
            self.proc.kill()
            self.proc.wait()


@pytest.fixture
def start_worker(tmp_path: Any) -> Iterator[Callable[..., WorkerProcess]]:
    """``start_worker(platform_env, **extra_env)`` -> a running :class:`WorkerProcess`; killed at teardown."""
    script = write_script(str(tmp_path), "handler.py", HANDLER)
    started: List[WorkerProcess] = []

    def start(platform_env: Dict[str, str], **extra_env: str) -> WorkerProcess:
        env = script_env()  # the test run's environment without any RUNPOD_ variable
        for name in CA_VARIABLES:
            env.pop(name, None)
        env.update(platform_env)
        env.update({
            "RUNPOD_PING_INTERVAL": "1000",
            # No fitness checks: one opens a connection to a public address.
            "RUNPOD_SKIP_AUTO_SYSTEM_CHECKS": "true",
            "RUNPOD_SKIP_GPU_CHECK": "true",
        })
        env.update(extra_env)
        worker = WorkerProcess(script, env, str(tmp_path / f"worker-{len(started)}.log"))
        started.append(worker)
        return worker

    try:
        yield start
    finally:
        for worker in started:
            worker.kill()


@pytest.fixture
def ca(tmp_path: Any) -> trustme.CA:
    """A private CA; its certificate is in ``tmp_path/ca.pem``."""
    authority = trustme.CA()
    authority.cert_pem.write_to_path(str(tmp_path / "ca.pem"))
    return authority


def _https_platform(ca: trustme.CA, *names: str, **options: Any) -> AiohttpPlatform:
    """An HTTPS stand-in (not started) whose certificate ``ca`` issued for ``names``."""
    return AiohttpPlatform(tls=server_tls(ca.issue_cert(*names).configure_cert), **options)


def _wait_for_results(platform: AiohttpPlatform, worker: WorkerProcess) -> None:
    """Wait until every job has a result; fail at once if the worker refused the
    certificate (no result would come) or died."""
    deadline = time.monotonic() + WAIT
    while time.monotonic() < deadline:
        # Woken by every result; the short timeout only lets a dead worker be seen.
        if platform.wait_until(lambda p: p.all_final() or len(p.handshake_failures) >= 3, 0.5):
            break
        if not worker.running():
            break
    assert not platform.handshake_failures, (
        f"the worker refused the stand-in's certificate: {platform.summary()}\n--- worker log:\n{worker.log()}")
    assert worker.running(), f"the worker exited ({worker.proc.returncode}): {platform.summary()}\n{worker.log()}"
    missing = platform.missing()
    assert not missing, (f"{len(missing)} of {JOBS} jobs have no result after {WAIT:.0f}s: {missing[:5]}; "
                         f"{platform.summary()}\n--- worker log:\n{worker.log()}")


def _completes_every_job_exactly_once(platform: AiohttpPlatform, start_worker: Callable[..., WorkerProcess],
                                      env: Optional[Dict[str, str]] = None, waves: int = 1) -> None:
    """64 jobs through a worker process: each completes once, with its own output; exit 0 on SIGTERM.

    With ``waves`` > 1 the jobs come in that many bursts, and each next one
    only once the server has closed the connections the last one's results
    came on: its results then go out on connections closed under the worker.
    """
    worker: Optional[WorkerProcess] = None
    ids: List[str] = []
    for wave in range(waves):
        ids += platform.queue_jobs(JOBS // waves, pad=PAD)
        if worker is None:
            worker = start_worker(platform.worker_env(), **(env or {}))
        _wait_for_results(platform, worker)
        if wave < waves - 1:
            assert wait_for(lambda: platform.idle_closed("done"), WAIT), (
                f"the server kept the posters' idle connections: {platform.summary()}")
    assert worker is not None and len(ids) == JOBS
    code = worker.stop()
    assert code == 0, f"exit code {code}\n{worker.log()}"
    # Only now, with the worker gone, can no late second result come.
    assert platform.duplicates() == {}, f"jobs reported more than once: {platform.summary()}\n{worker.log()}"
    wrong = [i for i in ids if platform.finals[i] != [{"output": {"echo": platform.input_of(i)}}]]
    assert not wrong, f"results that are not the job's echo: {wrong[:3]}: {platform.finals[wrong[0]]!r:.300}"
    assert platform.unknown == [] and platform.bad_auth == 0, platform.summary()


def _refuses_the_certificate(platform: AiohttpPlatform, worker: WorkerProcess) -> List[str]:
    """Wait until the worker has tried (and refused) enough TLS handshakes, stop it, and
    check that nothing got through and it exits 0; the reasons the server saw."""
    platform.wait_until(lambda p: p.handshakes >= REFUSED_HANDSHAKES or sum(p.requests.values()) > 0, WAIT)
    code = worker.stop()
    log = worker.log()
    assert platform.handshakes >= REFUSED_HANDSHAKES, f"{platform.summary()}\n--- worker log:\n{log}"
    # A request means the worker accepted the certificate: it would have sent its API key.
    assert sum(platform.requests.values()) == 0, f"the worker accepted the certificate: {platform.summary()}\n{log}"
    assert platform.finals == {}, platform.summary()
    assert code == 0, f"exit code {code}\n{log}"
    return list(platform.handshake_failures)


def _assert_one_error_naming_the_ca_variables(worker: WorkerProcess) -> None:
    """One ERROR line, which says where a CA can be given; the retries after it are quieter."""
    errors = worker.error_lines()
    assert len(errors) == 1, f"{len(errors)} ERROR lines, not 1; the worker's log:\n{worker.log()}"
    assert "SSL_CERT_FILE" in errors[0] and "REQUESTS_CA_BUNDLE" in errors[0], errors[0]


# ------------------------------------------------------------------ trusted through the environment

@pytest.mark.parametrize("variables", [
    ("SSL_CERT_FILE",), ("REQUESTS_CA_BUNDLE",), ("CURL_CA_BUNDLE",), ("SSL_CERT_FILE", "REQUESTS_CA_BUNDLE"),
], ids="+".join)
def test_https_trusts_a_private_ca_named_in_the_environment(variables, ca, tmp_path, start_worker):
    with _https_platform(ca, "127.0.0.1", "localhost") as platform:
        env = {name: str(tmp_path / "ca.pem") for name in variables}
        _completes_every_job_exactly_once(platform, start_worker, env)


def test_https_trusts_a_private_ca_in_a_hashed_directory_named_by_ssl_cert_dir(ca, tmp_path, start_worker):
    # OpenSSL looks a CA up in such a directory by the hash of its subject
    # name (<hash>.0, as c_rehash links it); openssl itself names the link.
    certs = tmp_path / "certs"
    certs.mkdir()
    digest = subprocess.run(["openssl", "x509", "-hash", "-noout", "-in", str(tmp_path / "ca.pem")],
                            capture_output=True, text=True, check=True).stdout.strip()
    os.symlink(str(tmp_path / "ca.pem"), str(certs / f"{digest}.0"))
    with _https_platform(ca, "127.0.0.1", "localhost") as platform:
        _completes_every_job_exactly_once(platform, start_worker, {"SSL_CERT_DIR": str(certs)})


# ------------------------------------------------------------------ framing and connections

@pytest.mark.parametrize("scheme", ["http", "https"])
def test_gzipped_chunked_answers_on_connections_the_server_closes_after_0_3s_idle(scheme, ca, tmp_path,
                                                                                   start_worker):
    # Jobs in bursts, each after the server closed the last one's result
    # connections (0.3 s idle), and a ping a second on a connection closed
    # after 0.3 s: the worker finds its kept-alive connections closed under it
    # again and again. The http run shows the framing alone, the https one
    # the same over TLS.
    options: Dict[str, Any] = dict(gzip=True, chunked=True, keepalive_timeout=0.3)
    if scheme == "https":
        platform = _https_platform(ca, "127.0.0.1", "localhost", **options)
        env = {"SSL_CERT_FILE": str(tmp_path / "ca.pem")}
    else:
        platform, env = AiohttpPlatform(**options), {}
    with platform:
        _completes_every_job_exactly_once(platform, start_worker, env, waves=4)
        assert platform.gzipped > 0 and platform.chunked_answers > 0, platform.summary()


def _ipv6_loopback() -> bool:
    try:
        with socket.socket(socket.AF_INET6, socket.SOCK_STREAM) as probe:
            probe.bind(("::1", 0))
        return True
    except OSError:
        return False


def test_plain_http_over_ipv6_loopback_completes_every_job_once(start_worker):
    if not _ipv6_loopback():
        if os.environ.get("CI"):
            pytest.fail("cannot bind [::1]: CI's machine has IPv6 loopback", pytrace=False)
        pytest.skip("no IPv6 loopback on this machine")
    with AiohttpPlatform(host="::1") as platform:
        assert platform.url.startswith("http://[::1]:")
        _completes_every_job_exactly_once(platform, start_worker)


# ------------------------------------------------------------------ refusals

def test_without_the_ca_the_worker_refuses_the_certificate_and_logs_one_error(ca, start_worker):
    with _https_platform(ca, "127.0.0.1", "localhost") as platform:
        platform.queue_jobs(JOBS)
        worker = start_worker(platform.worker_env())
        _refuses_the_certificate(platform, worker)
        _assert_one_error_naming_the_ca_variables(worker)


def test_a_certificate_for_another_host_name_is_refused_even_from_a_trusted_ca(ca, tmp_path, start_worker):
    # The CA is trusted every way a test here trusts it; the certificate
    # names example.test only, and the worker connects to 127.0.0.1.
    ca_file = str(tmp_path / "ca.pem")
    with _https_platform(ca, "example.test") as platform:
        platform.queue_jobs(JOBS)
        worker = start_worker(platform.worker_env(), SSL_CERT_FILE=ca_file, REQUESTS_CA_BUNDLE=ca_file)
        reasons = _refuses_the_certificate(platform, worker)
        # An unknown-CA alert would mean the refusal came before the name was
        # looked at: this test would then not pin the host-name check.
        assert not any("UNKNOWN_CA" in reason for reason in reasons), (
            f"the worker did not trust the CA in SSL_CERT_FILE/REQUESTS_CA_BUNDLE, so the host name was never "
            f"checked: {platform.summary()}\n--- worker log:\n{worker.log()}")
        errors = worker.error_lines()
        assert len(errors) == 1, f"{len(errors)} ERROR lines, not 1; the worker's log:\n{worker.log()}"
        assert "does not name 127.0.0.1" in errors[0], errors[0]  # the name, not the CA, is what to fix


# ------------------------------------------------------------------ nginx in front of the local platform

NGINX_CONF = """\
{user}
worker_processes 1;
pid {tmp}/nginx.pid;
error_log {tmp}/error.log warn;
events {{ worker_connections 256; }}
http {{
    log_format peers '$request_method $uri $status gzip=$gzip_ratio';
    access_log {tmp}/access.log peers;
    client_body_temp_path {tmp}/client_body;
    proxy_temp_path {tmp}/proxy;
    fastcgi_temp_path {tmp}/fastcgi;
    uwsgi_temp_path {tmp}/uwsgi;
    scgi_temp_path {tmp}/scgi;
    # Idle client connections closed after 1 s: the heartbeat's (once a
    # second) and the stop channel's are found closed again and again.
    keepalive_timeout 1s;
    gzip on;
    gzip_types application/json;
    gzip_min_length 0;
    upstream platform {{
        server 127.0.0.1:{upstream};
        keepalive 16;
    }}
    server {{
        listen 127.0.0.1:{port};
        location / {{
            proxy_pass http://platform;
            proxy_http_version 1.1;
            proxy_set_header Connection "";
            proxy_buffering on;
        }}
    }}
}}
"""


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


@pytest.fixture
def nginx(tmp_path: Any) -> Iterator[Callable[[int], int]]:
    """``nginx(upstream_port)`` -> the port of an nginx proxying to it (accepting
    connections when returned); stopped at teardown."""
    binary = _required_tool("nginx", "Debian package nginx")
    procs: List[subprocess.Popen] = []

    def start(upstream: int) -> int:
        prefix = tmp_path / "nginx"
        prefix.mkdir()
        port = _free_port()
        # As root, nginx's workers would run as nobody, who cannot enter pytest's tmp dirs.
        user = "user root;" if hasattr(os, "geteuid") and os.geteuid() == 0 else ""
        conf = prefix / "nginx.conf"
        conf.write_text(NGINX_CONF.format(user=user, tmp=prefix, upstream=upstream, port=port))
        log = prefix / "stderr.log"
        with open(log, "wb") as out:
            proc = subprocess.Popen([binary, "-p", str(prefix), "-c", str(conf), "-e", str(prefix / "error.log"),
                                     "-g", "daemon off;"], stdout=out, stderr=subprocess.STDOUT)
        procs.append(proc)
        deadline = time.monotonic() + WAIT
        while True:
            try:
                socket.create_connection(("127.0.0.1", port), timeout=1.0).close()
                return port
            except OSError:
                if proc.poll() is not None or time.monotonic() > deadline:
                    errors = (prefix / "error.log").read_text() if (prefix / "error.log").exists() else ""
                    pytest.fail(f"nginx did not start (exit {proc.poll()}): {log.read_text()}{errors}")
                time.sleep(0.02)  # polling a port: nothing tells us when nginx listens

    try:
        yield start
    finally:
        for proc in procs:
            proc.terminate()
            try:
                proc.wait(10)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()


def test_every_job_completes_once_through_nginx_with_gzip_and_short_keepalive(nginx, tmp_path, start_worker):
    platform = Platform(take_cost=0.0, long_poll=0.2).start()
    try:
        port = nginx(platform.port)
        ids = [platform.submit({"n": i, "pad": "x" * PAD}) for i in range(JOBS)]
        # The local platform's own URLs, with nginx's address in place of its own.
        env = {name: value.replace(platform.url, f"http://127.0.0.1:{port}")
               for name, value in platform.worker_env("w1").items()}
        worker = start_worker(env)
        deadline = time.monotonic() + WAIT
        while time.monotonic() < deadline and worker.running():
            # Woken by every request; the short timeout only lets a dead worker be seen.
            if platform.wait_until(lambda p: p.counts()["completed"] >= JOBS, 0.5):
                break
        counts = platform.counts()
        assert counts["completed"] == JOBS, f"{counts}\n--- worker log:\n{worker.log()}"
        code = worker.stop()
        assert code == 0, f"exit code {code}\n{worker.log()}"
        counts = platform.counts()
        assert counts["duplicates"] == 0 and counts["unknown"] == 0, counts
        wrong = [job_id for n, job_id in enumerate(ids)
                 if platform.status(job_id).get("output") != {"echo": {"n": n, "pad": "x" * PAD}}]
        assert not wrong, f"results that are not the job's echo: {wrong[:3]}"
        # nginx gzipped the takes' answers, so the worker decoded gzip from a proxy.
        access = (tmp_path / "nginx" / "access.log").read_text()
        gzipped = [line for line in access.splitlines() if "job-take" in line and " 200 " in line
                   and "gzip=-" not in line]
        assert gzipped, f"no take answer went out gzipped:\n{access[:2000]}"
    finally:
        platform.close()
