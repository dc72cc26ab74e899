"""runpod 1.12.0's automatic fitness checks on the deployed worker.

Process tests run real workers against the local platform. The machine
they see is arranged per test: ``PATH`` holds only a temporary folder with
a fake ``nvidia-smi`` (a shell script printing what the real one prints)
or nothing at all (a CPU-only machine; the real ``nvcc`` some machines
have is out of reach too). The network check is pointed at a loopback
listener from inside the worker script, so no test sends traffic beyond
this machine.
"""

from __future__ import annotations

import json
import os
import queue
import shlex
import signal
import socket
import sys
import threading
import types
import urllib.request
from typing import Any, Dict, Iterator, List, Optional, Tuple

import pytest

from slotworker.platform import Platform
from slotworker.worker.fitness import auto_checks, gpu_checks, nvidia, system_checks

from support import run_script, spawn_script, write_script

# What nvidia-smi prints on a healthy A100 machine (plain and --list-gpus).
def smi_banner(cuda: str = "12.8") -> str:
    return f"""\
Tue Oct 14 10:00:00 2025
+-----------------------------------------------------------------------------------------+
| NVIDIA-SMI 570.172.08             Driver Version: 570.172.08     CUDA Version: {cuda}     |
|-----------------------------------------+------------------------+----------------------+
| GPU  Name                 Persistence-M | Bus-Id          Disp.A | Volatile Uncorr. ECC |
| Fan  Temp   Perf          Pwr:Usage/Cap |           Memory-Usage | GPU-Util  Compute M. |
|                                         |                        |               MIG M. |
|=========================================+========================+======================|
|   0  NVIDIA A100-SXM4-80GB          On  |   00000000:07:00.0 Off |                    0 |
| N/A   33C    P0             61W /  400W |       1MiB /  81920MiB |      0%      Default |
|                                         |                        |             Disabled |
+-----------------------------------------+------------------------+----------------------+

+-----------------------------------------------------------------------------------------+
| Processes:                                                                              |
|  GPU   GI   CI              PID   Type   Process name                        GPU Memory |
|        ID   ID                                                               Usage      |
|=========================================================================================|
|  No running processes found                                                             |
+-----------------------------------------------------------------------------------------+
"""


GPU_LIST = "GPU 0: NVIDIA A100-SXM4-80GB (UUID: GPU-5a1c3f9e-2b7d-4e60-9c1a-0d8e6f4b2a71)\n"
DRIVER_DOWN = ("NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver. "
               "Make sure that the latest NVIDIA driver is installed and running.\n")
NVCC_13 = """\
nvcc: NVIDIA (R) Cuda compiler driver
Copyright (c) 2005-2025 NVIDIA Corporation
Built on Wed_Aug_20_01:58:59_PM_PDT_2025
Cuda compilation tools, release 13.0, V13.0.88
Build cuda_13.0.r13.0/compiler.36424714_0
"""

#: An answer of a fake tool: (exit code, stdout).
Answer = Tuple[int, str]


def fake_tool(folder: str, name: str, answers: Dict[str, Answer], calls: str) -> None:
    """A shell script ``folder/name`` answering each argument string in ``answers``
    (anything else: exit 2) and appending its arguments, one call a line, to ``calls``.
    Only shell built-ins are used, so it runs with ``PATH`` holding just ``folder``."""
    lines = ["#!/bin/sh", f"printf '%s\\n' \"$*\" >> {shlex.quote(calls)}", 'case "$*" in']
    for args, (code, out) in answers.items():
        printed = " ".join(shlex.quote(line) for line in out.splitlines()) or "''"
        lines.append(f"  {shlex.quote(args)}) printf '%s\\n' {printed}; exit {code} ;;")
    lines += ["  *) exit 2 ;;", "esac", ""]
    path = os.path.join(folder, name)
    with open(path, "w", encoding="utf-8") as handle:
        handle.write("\n".join(lines))
    os.chmod(path, 0o755)


def calls_of(path: str) -> List[str]:
    """The argument strings a fake tool was called with, in order (none when never called)."""
    if not os.path.exists(path):
        return []
    with open(path, encoding="utf-8") as handle:
        return handle.read().splitlines()


WORKER = """
    import os
    import slotworker as runpod
    from slotworker.worker.fitness import system_checks

    # runpod offers no setting for the network check's target; the test points
    # it at its own loopback listener so that no traffic leaves the machine.
    system_checks.NETWORK_PROBE_HOST = "127.0.0.1"
    system_checks.NETWORK_PROBE_PORT = int(os.environ["PROBE_PORT"])

    @runpod.serverless.register_fitness_check
    def user_check():
        with open(os.environ["USER_CHECK_MARK"], "a") as mark:
            mark.write("ran\\n")
        if os.environ.get("USER_CHECK_FAILS"):
            raise RuntimeError("the user's check failed")

    runpod.serverless.start({"handler": lambda job: {"ran": True}})
"""


@pytest.fixture
def listener() -> Iterator[int]:
    """The port of a loopback TCP listener: connections to it open (the kernel accepts them)."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        sock.listen(64)
        yield sock.getsockname()[1]


@pytest.fixture
def closed_port() -> Iterator[int]:
    """A loopback port bound but not listening: connections to it are refused."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        yield sock.getsockname()[1]


class Machine:
    """What a worker process sees: a ``PATH`` folder of fake tools, a probe port, the environment."""

    def __init__(self, tmp_path: Any, probe_port: int) -> None:
        self.dir = str(tmp_path)
        self.bin = os.path.join(self.dir, "bin")
        os.mkdir(self.bin)
        self.smi_calls = os.path.join(self.dir, "nvidia-smi.calls")
        self.mark = os.path.join(self.dir, "user-check.mark")
        self.script = write_script(self.dir, "worker.py", WORKER)
        self.probe_port = probe_port

    def gpu(self, banner: Answer = (0, smi_banner()), listing: Answer = (0, GPU_LIST)) -> "Machine":
        """Put a fake nvidia-smi on the machine."""
        fake_tool(self.bin, "nvidia-smi", {"": banner, "--list-gpus": listing}, self.smi_calls)
        return self

    def nvcc(self, answer: Answer = (0, NVCC_13)) -> "Machine":
        """Put a fake nvcc on the machine."""
        fake_tool(self.bin, "nvcc", {"--version": answer}, os.path.join(self.dir, "nvcc.calls"))
        return self

    def env(self, platform: Platform, **extra: str) -> Dict[str, str]:
        """The worker's environment: every check on, memory and disk thresholds at 0 unless given."""
        env = dict(platform.worker_env("w1"))
        env.update(PATH=self.bin, PROBE_PORT=str(self.probe_port), USER_CHECK_MARK=self.mark,
                   RUNPOD_SKIP_AUTO_SYSTEM_CHECKS="false", RUNPOD_SKIP_GPU_CHECK="false",
                   RUNPOD_MIN_MEMORY_GB="0", RUNPOD_MIN_DISK_PERCENT="0")
        env.update(extra)
        return env

    def user_check_ran(self) -> bool:
        return os.path.exists(self.mark)


@pytest.fixture
def machine(tmp_path: Any, listener: int) -> Machine:
    return Machine(tmp_path, listener)


def assert_unhealthy(machine: Machine, check: str, in_reason: str, **env: str) -> str:
    """Run the worker; it must exit 1 before any take, reporting ``check`` unhealthy. Returns its output."""
    with Platform(long_poll=0.2) as platform:
        job_id = platform.submit({})
        proc = run_script(machine.script, env=machine.env(platform, **env), timeout=60)
        out = proc.stdout + proc.stderr
        assert proc.returncode == 1, out
        assert f"Fitness check failed: {check}" in out, out
        assert not platform.takes(), "a worker that failed its checks must not take jobs"
        assert platform.status(job_id)["status"] == "IN_QUEUE"
        pings = [e for e in platform.events if e.kind == "ping"]
        assert len(pings) == 1, pings
        assert pings[0].query["status"] == "unhealthy"
        assert pings[0].query["check"] == check
        assert in_reason in pings[0].query["reason"], pings[0].query["reason"]
    return out


def assert_healthy(machine: Machine, **env: str) -> str:
    """Run the worker until it has done a job, then stop it; it must exit 0. Returns its output."""
    with Platform(long_poll=0.2) as platform:
        job_id = platform.submit({})
        proc = spawn_script(machine.script, env=machine.env(platform, **env))
        try:
            done = platform.wait_final([job_id], timeout=60)
        finally:
            proc.send_signal(signal.SIGTERM)
            out, _ = proc.communicate(timeout=60)
        assert done, out
        assert proc.returncode == 0, out
        assert platform.status(job_id)["output"] == {"ran": True}
        assert not [e for e in platform.events if e.kind == "ping" and e.query.get("status") == "unhealthy"]
    return out


# -- GPU machines (fake nvidia-smi) ----------------------------------------------------
def test_a_healthy_gpu_machine_passes_every_check_and_takes_jobs(machine: Machine) -> None:
    out = assert_healthy(machine.gpu(), RUNPOD_MIN_CUDA_VERSION="12.4")
    assert "running 8 fitness check(s)" in out, out  # the user's and all seven automatic ones
    assert "GPU check passed: 1 GPU(s)" in out
    assert "CUDA version check passed: 12.8 from nvidia-smi (minimum 12.4)" in out
    assert "network check passed: connected to 127.0.0.1" in out
    assert "--list-gpus" in calls_of(machine.smi_calls)


def test_nvidia_smi_failing_to_list_the_gpus_fails_the_gpu_check(machine: Machine) -> None:
    machine.gpu(listing=(15, "Unable to determine the device handle for GPU0000:07:00.0: Unknown Error"))
    assert_unhealthy(machine, "_gpu_health_check", "nvidia-smi --list-gpus failed (exit 15): Unable to determine")


def test_nvidia_smi_listing_no_gpu_fails_the_gpu_check(machine: Machine) -> None:
    assert_unhealthy(machine.gpu(listing=(0, "")), "_gpu_health_check", "listed no GPU")


def test_a_cuda_version_below_the_minimum_fails(machine: Machine) -> None:
    assert_unhealthy(machine.gpu(banner=(0, smi_banner("11.4"))), "_cuda_version_check",
                     "CUDA version too old: 11.4 found")  # the default minimum, 11.8


def test_the_minimum_cuda_version_comes_from_the_environment(machine: Machine) -> None:
    assert_unhealthy(machine.gpu(), "_cuda_version_check", "12.8 found (nvidia-smi says '12.8'), 12.9 required",
                     RUNPOD_MIN_CUDA_VERSION="12.9")


def test_an_unreadable_cuda_version_fails(machine: Machine) -> None:
    assert_unhealthy(machine.gpu(banner=(0, smi_banner("N/A"))), "_cuda_version_check",
                     "unreadable version (counted as 0.0)")


def test_nvcc_is_asked_for_the_cuda_version_before_nvidia_smi(machine: Machine) -> None:
    out = assert_healthy(machine.gpu(banner=(0, smi_banner("11.4"))).nvcc())
    assert "CUDA version check passed: 13.0 from nvcc" in out, out


def test_a_machine_whose_nvidia_smi_fails_counts_as_cpu_only(machine: Machine) -> None:
    out = assert_healthy(machine.gpu(banner=(9, DRIVER_DOWN), listing=(9, DRIVER_DOWN)))
    assert "running 4 fitness check(s)" in out, out  # the user's, memory, disk, network
    assert "--list-gpus" not in calls_of(machine.smi_calls)


def test_skip_gpu_check_skips_only_the_gpu_health_check(machine: Machine) -> None:
    machine.gpu(listing=(15, "Unable to determine the device handle"))
    out = assert_healthy(machine, RUNPOD_SKIP_GPU_CHECK="TRUE")
    assert "running 7 fitness check(s)" in out, out
    assert "CUDA version check passed" in out
    # The version check still fails a GPU machine with the gpu check skipped:
    machine.gpu(banner=(0, smi_banner("11.4")))
    assert_unhealthy(machine, "_cuda_version_check", "11.4 found", RUNPOD_SKIP_GPU_CHECK="true")


def test_skip_auto_system_checks_leaves_only_the_gpu_health_check(machine: Machine) -> None:
    machine.gpu(banner=(0, smi_banner("11.4")))
    out = assert_healthy(machine, RUNPOD_SKIP_AUTO_SYSTEM_CHECKS="true", RUNPOD_MIN_MEMORY_GB="100000")
    assert "running 2 fitness check(s)" in out, out
    machine.gpu(listing=(15, "Unable to determine the device handle"))
    assert_unhealthy(machine, "_gpu_health_check", "exit 15", RUNPOD_SKIP_AUTO_SYSTEM_CHECKS="true")


def test_with_both_switches_on_nvidia_smi_is_never_run(machine: Machine) -> None:
    out = assert_healthy(machine.gpu(), RUNPOD_SKIP_AUTO_SYSTEM_CHECKS="true", RUNPOD_SKIP_GPU_CHECK="true")
    assert "running 1 fitness check(s)" in out, out
    assert calls_of(machine.smi_calls) == []


def test_a_switch_counts_only_when_it_says_true(machine: Machine) -> None:
    assert_unhealthy(machine, "_memory_check", "required", RUNPOD_SKIP_AUTO_SYSTEM_CHECKS="1",
                     RUNPOD_MIN_MEMORY_GB="100000")


# -- every machine (no nvidia-smi on PATH) ------------------------------------------------
def test_a_cpu_machine_runs_memory_disk_and_network_after_the_users_checks(machine: Machine) -> None:
    out = assert_healthy(machine)
    assert "running 4 fitness check(s)" in out, out
    assert out.index("memory check passed") < out.index("disk check passed") < out.index("network check passed")


def test_too_little_memory_fails_the_memory_check(machine: Machine) -> None:
    assert_unhealthy(machine, "_memory_check", "100000GB required", RUNPOD_MIN_MEMORY_GB="100000")
    assert machine.user_check_ran(), "the user's checks run before the automatic ones"


def test_too_little_free_disk_fails_the_disk_check(machine: Machine) -> None:
    assert_unhealthy(machine, "_disk_check", "101% required", RUNPOD_MIN_DISK_PERCENT="101")


def test_no_network_fails_the_network_check(machine: Machine, closed_port: int) -> None:
    machine.probe_port = closed_port
    assert_unhealthy(machine, "_network_check", f"127.0.0.1:{closed_port} refused the connection")


def test_a_threshold_that_is_not_a_number_fails_its_check(machine: Machine) -> None:
    assert_unhealthy(machine, "_memory_check", "RUNPOD_MIN_MEMORY_GB='lots' is not a number",
                     RUNPOD_MIN_MEMORY_GB="lots")


def test_a_failing_user_check_is_reported_before_any_automatic_one(machine: Machine) -> None:
    assert_unhealthy(machine.gpu(listing=(15, "broken")), "user_check", "the user's check failed",
                     USER_CHECK_FAILS="1", RUNPOD_MIN_MEMORY_GB="100000")
    # nvidia-smi was asked once whether there is a GPU (the automatic checks are chosen
    # before any check runs, as in runpod), but no automatic check ran.
    assert calls_of(machine.smi_calls) == [""]


def test_the_automatic_checks_do_not_run_in_local_test_mode(machine: Machine) -> None:
    env = {"PATH": machine.bin, "PROBE_PORT": str(machine.probe_port), "USER_CHECK_MARK": machine.mark,
           "RUNPOD_MIN_MEMORY_GB": "100000"}
    machine.gpu(listing=(15, "broken"))
    proc = run_script(machine.script, "--test_input", '{"input": {}}', env=env, cwd=machine.dir, timeout=60)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "Fitness check" not in proc.stdout
    assert calls_of(machine.smi_calls) == []


def test_the_automatic_checks_do_not_run_under_the_local_api(machine: Machine) -> None:
    machine.gpu(listing=(15, "broken"))
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    env = {"PATH": machine.bin, "PROBE_PORT": str(machine.probe_port), "USER_CHECK_MARK": machine.mark,
           "RUNPOD_MIN_MEMORY_GB": "100000"}
    proc = spawn_script(machine.script, "--rp_serve_api", "--rp_api_host", "127.0.0.1", "--rp_api_port", str(port),
                        env=env, cwd=machine.dir)
    lines: "queue.Queue[str]" = queue.Queue()
    reader = threading.Thread(target=lambda: [lines.put(line) for line in proc.stdout or ()], daemon=True)
    reader.start()
    seen: List[str] = []
    try:
        while not any("local API at" in line for line in seen):  # logged once the server listens
            seen.append(lines.get(timeout=30))
        request = urllib.request.Request(f"http://127.0.0.1:{port}/runsync", method="POST", data=b'{"input": {}}')
        with urllib.request.urlopen(request, timeout=30) as response:
            answer = json.loads(response.read())
    finally:
        proc.send_signal(signal.SIGINT)
        proc.wait(timeout=30)
        reader.join(30)
    while not lines.empty():
        seen.append(lines.get())
    out = "".join(seen)
    assert answer["output"] == {"ran": True}, out
    assert proc.returncode == 0, out
    assert "Fitness check" not in out
    assert calls_of(machine.smi_calls) == []


# -- units --------------------------------------------------------------------------
@pytest.mark.parametrize("text, version", [
    ("12.8", (12, 8)),
    ("CUDA Version: 12.10", (12, 10)),
    ("Cuda compilation tools, release 13.0, V13.0.88", (13, 0)),
    ("N/A", None),
    ("12", None),
    ("", None),
])
def test_parse_version(text: str, version: Optional[Tuple[int, int]]) -> None:
    assert nvidia.parse_version(text) == version


def test_versions_compare_by_number_not_by_text() -> None:
    assert nvidia.parse_version("12.10") > nvidia.parse_version("12.9")  # type: ignore[operator]
    assert nvidia.parse_version("11.8") < nvidia.parse_version("12.0")  # type: ignore[operator]


def test_the_cuda_version_in_nvidia_smi_and_nvcc_output() -> None:
    assert nvidia.cuda_version_in_smi_output(smi_banner("12.8")) == "12.8"
    assert nvidia.cuda_version_in_smi_output(smi_banner("N/A")) == "N/A"
    assert nvidia.cuda_version_in_smi_output("| NVIDIA-SMI 570.172.08   CUDA Version:") is None
    assert nvidia.cuda_version_in_smi_output(GPU_LIST) is None
    assert nvidia.cuda_version_in_nvcc_output(NVCC_13) == "Cuda compilation tools, release 13.0, V13.0.88"
    assert nvidia.cuda_version_in_nvcc_output("nvcc: NVIDIA (R) Cuda compiler driver\n") is None


@pytest.mark.parametrize("found, minimum, passes", [
    (("nvidia-smi", "12.8"), "12.8", True),
    (("nvidia-smi", "12.10"), "12.9", True),
    (("nvcc", "Cuda compilation tools, release 11.7, V11.7.99"), "11.8", False),
    (("nvidia-smi", "N/A"), "11.8", False),
    (("nvidia-smi", "N/A"), "twelve", True),  # no minimum: even an unreadable version passes, as in runpod
    (("nvidia-smi", "11.0"), "12", True),  # "12" is no MAJOR.MINOR, so no minimum (runpod reads it so)
    (None, "99.9", True),  # no tool tells a version: skipped with a warning
])
def test_the_cuda_version_check(found: Optional[Tuple[str, str]], minimum: str, passes: bool,
                                monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(nvidia, "installed_cuda_version", lambda: found)
    if passes:
        gpu_checks.check_cuda_version(minimum)
    else:
        with pytest.raises(RuntimeError, match="CUDA version too old"):
            gpu_checks.check_cuda_version(minimum)


def test_listed_gpus_counts_non_blank_lines() -> None:
    two = GPU_LIST + "\n" + GPU_LIST.replace("GPU 0", "GPU 1") + "\n\n"
    assert len(nvidia.listed_gpus(two)) == 2
    assert nvidia.listed_gpus(" \n\n") == []


def test_a_missing_tool_is_reported_not_raised(tmp_path: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PATH", str(tmp_path))
    run = nvidia.run_tool(["nvidia-smi"], 5)
    assert not run.ok and run.problem == "nvidia-smi not found"
    assert nvidia.gpu_present() is False
    assert nvidia.installed_cuda_version() is None


def names(checks: List[auto_checks.NamedCheck]) -> List[str]:
    return [name for name, _ in checks]


ALL = ["_gpu_health_check", "_memory_check", "_disk_check", "_network_check",
       "_cuda_version_check", "_cuda_init_check", "_benchmark_check"]


@pytest.mark.parametrize("env, gpu, expected", [
    ({}, True, ALL),
    ({}, False, ALL[1:4]),
    ({"RUNPOD_SKIP_GPU_CHECK": "true"}, True, ALL[1:]),
    ({"RUNPOD_SKIP_AUTO_SYSTEM_CHECKS": "True"}, True, ALL[:1]),
    ({"RUNPOD_SKIP_AUTO_SYSTEM_CHECKS": "yes"}, False, ALL[1:4]),
    ({"RUNPOD_SKIP_AUTO_SYSTEM_CHECKS": "true", "RUNPOD_SKIP_GPU_CHECK": "true"}, True, []),
])
def test_which_automatic_checks_run(env: Dict[str, str], gpu: bool, expected: List[str]) -> None:
    asked: List[bool] = []

    def detect() -> bool:
        asked.append(True)
        return gpu

    assert names(auto_checks.automatic_checks(env, gpu_present=detect)) == expected
    assert len(asked) == (0 if expected == [] else 1)


def test_runpods_defaults() -> None:
    assert auto_checks.number({}, auto_checks.MIN_MEMORY_GB) == 4.0
    assert auto_checks.number({}, auto_checks.MIN_DISK_PERCENT) == 10.0
    assert auto_checks.number({}, auto_checks.NETWORK_CHECK_TIMEOUT) == 5.0
    assert auto_checks.number({}, auto_checks.GPU_BENCHMARK_TIMEOUT) == 2.0
    assert auto_checks.text({}, auto_checks.MIN_CUDA_VERSION) == "11.8"


@pytest.mark.parametrize("raw, value", [("", 4.0), (" 8 ", 8.0), ("0.5", 0.5), ("-1", -1.0)])
def test_thresholds_read_from_the_environment(raw: str, value: float) -> None:
    assert auto_checks.number({"RUNPOD_MIN_MEMORY_GB": raw}, auto_checks.MIN_MEMORY_GB) == value


@pytest.mark.parametrize("raw", ["lots", "nan", "inf", "0", "-2"])
def test_timeouts_must_be_positive_numbers(raw: str) -> None:
    with pytest.raises(ValueError, match="RUNPOD_NETWORK_CHECK_TIMEOUT"):
        auto_checks.number({"RUNPOD_NETWORK_CHECK_TIMEOUT": raw}, auto_checks.NETWORK_CHECK_TIMEOUT, positive=True)


def test_the_environment_is_read_when_the_checks_run_not_before() -> None:
    env: Dict[str, str] = {}
    checks = dict(auto_checks.automatic_checks(env, gpu_present=lambda: False))
    env["RUNPOD_MIN_MEMORY_GB"] = "100000"
    with pytest.raises(RuntimeError, match="100000GB required"):
        checks["_memory_check"]()


def test_memory_is_read_from_meminfo(tmp_path: Any) -> None:
    meminfo = tmp_path / "meminfo"
    meminfo.write_text("MemTotal:       16777216 kB\nMemFree:         1048576 kB\n"
                       "MemAvailable:    8388608 kB\nCached:          2097152 kB\n")
    assert system_checks.meminfo_memory(str(meminfo)) == (8.0, 16.0)
    # Without MemAvailable (kernels before 3.14): free + cached + buffers.
    meminfo.write_text("MemTotal:       16777216 kB\nMemFree:         1048576 kB\nCached:          2097152 kB\n")
    assert system_checks.meminfo_memory(str(meminfo)) == (3.0, 16.0)
    with pytest.raises(RuntimeError, match="cannot read memory information"):
        system_checks.meminfo_memory(str(tmp_path / "missing"))


def test_memory_comes_from_psutil_when_it_is_installed(monkeypatch: pytest.MonkeyPatch) -> None:
    figures = types.SimpleNamespace(available=6 << 30, total=32 << 30)
    monkeypatch.setitem(sys.modules, "psutil", types.SimpleNamespace(virtual_memory=lambda: figures))
    assert system_checks.available_memory() == (6.0, 32.0)
    system_checks.check_memory(6.0)
    with pytest.raises(RuntimeError, match="Insufficient memory: 6.00GB available, 6.5GB required"):
        system_checks.check_memory(6.5)
    monkeypatch.setitem(sys.modules, "psutil", None)  # not installed: /proc/meminfo
    with pytest.raises(RuntimeError, match="/nonexistent/meminfo"):
        system_checks.available_memory("/nonexistent/meminfo")


def test_the_network_check_against_loopback(listener: int, closed_port: int, monkeypatch: pytest.MonkeyPatch) -> None:
    system_checks.check_network(5.0, "127.0.0.1", listener)
    with pytest.raises(RuntimeError, match="refused the connection"):
        system_checks.check_network(5.0, "127.0.0.1", closed_port)

    def times_out(address: Any, timeout: float) -> socket.socket:
        raise socket.timeout("timed out")

    monkeypatch.setattr(socket, "create_connection", times_out)
    with pytest.raises(RuntimeError, match=r"no connection to 127.0.0.1:\d+ within 2s"):
        system_checks.check_network(2.0, "127.0.0.1", listener)


def test_the_network_check_targets_runpods_address_by_default() -> None:
    # Read only: connecting there is the deployed worker's business, not a test's.
    assert (system_checks.NETWORK_PROBE_HOST, system_checks.NETWORK_PROBE_PORT) == ("8.8.8.8", 53)


# -- CUDA start-up and compute with a stand-in for PyTorch -------------------------------------
class FakeTorch(types.ModuleType):
    """Just enough of ``torch`` for the CUDA checks; ``fault`` makes one call raise."""

    def __init__(self, available: bool = True, devices: int = 2, memory: int = 80 << 30,
                 fault: Optional[BaseException] = None) -> None:
        super().__init__("torch")
        self.calls: List[str] = []
        outer = self

        class Cuda:
            @staticmethod
            def is_available() -> bool:
                return available

            @staticmethod
            def reset_peak_memory_stats() -> None:
                outer.calls.append("reset")

            @staticmethod
            def synchronize() -> None:
                outer.calls.append("sync")

            @staticmethod
            def device_count() -> int:
                return devices

            @staticmethod
            def get_device_properties(index: int) -> Any:
                return types.SimpleNamespace(total_memory=memory)

        self.cuda = Cuda
        self.fault = fault

    def zeros(self, n: int, device: str) -> None:
        self.calls.append(f"zeros {device}")
        if self.fault is not None:
            raise self.fault

    def randn(self, *shape: int, device: str) -> str:
        self.calls.append("randn")
        return "matrix"

    def matmul(self, a: Any, b: Any) -> None:
        self.calls.append("matmul")
        if self.fault is not None:
            raise self.fault


@pytest.fixture
def no_cupy(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "cupy", None)  # importing it raises ImportError


def test_cuda_init_touches_every_device_with_torch(monkeypatch: pytest.MonkeyPatch, no_cupy: None) -> None:
    torch = FakeTorch()
    monkeypatch.setitem(sys.modules, "torch", torch)
    gpu_checks.check_cuda_init()
    assert "zeros cuda:0" in torch.calls and "zeros cuda:1" in torch.calls


@pytest.mark.parametrize("torch, message", [
    (FakeTorch(devices=0), "counts no device"),
    (FakeTorch(memory=0), "GPU 0 reports no memory"),
    (FakeTorch(fault=RuntimeError("CUDA error: out of memory")), "GPU 0 did not initialize: CUDA error"),
])
def test_cuda_init_failures(torch: FakeTorch, message: str, monkeypatch: pytest.MonkeyPatch, no_cupy: None) -> None:
    monkeypatch.setitem(sys.modules, "torch", torch)
    with pytest.raises(RuntimeError, match=f"CUDA initialization failed: .*{message}"):
        gpu_checks.check_cuda_init()


def test_cuda_checks_pass_untested_without_torch_or_cupy(monkeypatch: pytest.MonkeyPatch, no_cupy: None) -> None:
    monkeypatch.setitem(sys.modules, "torch", None)
    gpu_checks.check_cuda_init()
    gpu_checks.check_gpu_benchmark(2.0)
    monkeypatch.setitem(sys.modules, "torch", FakeTorch(available=False))
    gpu_checks.check_cuda_init()
    gpu_checks.check_gpu_benchmark(2.0)


def test_the_benchmark_times_a_matrix_multiply(monkeypatch: pytest.MonkeyPatch, no_cupy: None) -> None:
    torch = FakeTorch()
    monkeypatch.setitem(sys.modules, "torch", torch)
    gpu_checks.check_gpu_benchmark(60.0)
    assert torch.calls == ["randn", "randn", "matmul", "sync"]
    with pytest.raises(RuntimeError, match="GPU compute too slow: a 1024x1024 matrix multiply took"):
        gpu_checks.check_gpu_benchmark(1e-9)  # no multiply, however fast, takes under a nanosecond


def test_the_benchmark_fails_on_a_cuda_fault_and_skips_on_other_errors(monkeypatch: pytest.MonkeyPatch,
                                                                        no_cupy: None) -> None:
    monkeypatch.setitem(sys.modules, "torch", FakeTorch(fault=RuntimeError("CUDA error: illegal address")))
    with pytest.raises(RuntimeError, match="illegal address"):
        gpu_checks.check_gpu_benchmark(2.0)
    monkeypatch.setitem(sys.modules, "torch", FakeTorch(fault=TypeError("odd build")))
    gpu_checks.check_gpu_benchmark(2.0)
