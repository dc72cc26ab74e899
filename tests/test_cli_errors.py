"""What a new user trips on, answered in one line each instead of a traceback:
a port already in use (``slotworker platform --port``, ``--rp_serve_api``),
and a module or script that is not there (``slotworker run``).

Every command runs as a real process, as a user would type it.
"""

from __future__ import annotations

import socket
import subprocess
import sys
from pathlib import Path
from typing import Iterator, List, Optional

import pytest

from slotworker.platform import BindError, Platform

from support import run_script, script_env, write_script

TIMEOUT = 60.0

HANDLER = """
    import slotworker as runpod

    def handler(job):
        return job["input"]

    runpod.serverless.start({"handler": handler})
"""


def slotworker(*args: str, cwd: Optional[Path] = None) -> subprocess.CompletedProcess:
    """``python -m slotworker ARGS`` to completion."""
    return subprocess.run([sys.executable, "-m", "slotworker", *args], cwd=cwd, env=script_env(),
                          capture_output=True, text=True, timeout=TIMEOUT)


def one_line(proc: subprocess.CompletedProcess) -> str:
    """The single line the process wrote on stderr (and no traceback anywhere)."""
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1, proc.stderr
    assert "Traceback" not in proc.stdout + proc.stderr
    return lines[0]


@pytest.fixture
def busy_port() -> Iterator[int]:
    """A loopback port another socket is listening on."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        sock.listen(1)
        yield sock.getsockname()[1]


# ---------------------------------------------------------------- a port in use
@pytest.mark.parametrize("command", [["-m", "slotworker", "platform"], ["-m", "slotworker.platform"]],
                         ids=["slotworker platform", "python -m slotworker.platform"])
def test_the_platform_on_a_port_in_use_says_so_in_one_line(busy_port: int, command: List[str]) -> None:
    proc = subprocess.run([sys.executable, *command, "--port", str(busy_port)], env=script_env(),
                          capture_output=True, text=True, timeout=TIMEOUT)
    assert proc.returncode == 1, proc.stderr
    line = one_line(proc)
    prog = "slotworker platform" if command[-1] == "platform" else "python -m slotworker.platform"
    assert line == (f"{prog}: cannot listen on 127.0.0.1:{busy_port}: address already in use; "
                    "pick another port with --port N (0: any free port)")
    assert proc.stdout == ""  # no worker environment for a platform that is not there


@pytest.mark.parametrize("host", ["127.0.0.1", None], ids=["--rp_api_host 127.0.0.1", "default host"])
@pytest.mark.parametrize("runner", ["python", "slotworker run"])
def test_rp_serve_api_on_a_port_in_use_says_so_in_one_line(tmp_path: Path, busy_port: int, runner: str,
                                                           host: Optional[str]) -> None:
    path = write_script(str(tmp_path), "handler.py", HANDLER)
    flags = ["--rp_serve_api", "--rp_api_port", str(busy_port)] + (["--rp_api_host", host] if host else [])
    if runner == "python":
        proc = run_script(path, *flags, cwd=str(tmp_path), timeout=TIMEOUT)
    else:
        proc = slotworker("run", path, *flags, cwd=tmp_path)
    assert proc.returncode == 1, proc.stdout + proc.stderr
    # runpod's default host is localhost, which is 127.0.0.1 for an IPv4 server.
    address = f"{host or 'localhost'}:{busy_port}"
    assert one_line(proc) == (f"slotworker --rp_serve_api: cannot listen on {address}: address already in use; "
                              "pick another port with --rp_api_port N (0: any free port)")


def test_a_platform_that_cannot_listen_raises_a_bind_error_with_its_address(busy_port: int) -> None:
    platform = Platform("127.0.0.1", busy_port)
    with pytest.raises(BindError) as caught:
        platform.start()
    error = caught.value
    assert isinstance(error, OSError) and error.in_use  # callers catching OSError still do
    assert (error.host, error.port, error.address) == ("127.0.0.1", busy_port, f"127.0.0.1:{busy_port}")
    assert isinstance(error.__cause__, OSError)
    platform.close()
    # Not a port in use: the hint names the host flag as well.
    with pytest.raises(BindError) as caught:
        Platform("127.0.0.1", 70000).start()
    assert not caught.value.in_use
    hint = caught.value.hint("--port", "--host")  # the reason's words are the interpreter's
    assert hint.startswith("cannot listen on 127.0.0.1:70000: ") and hint.endswith("; change --host or --port")
    assert BindError("::1", 8000, OSError(98, "Address already in use")).address == "[::1]:8000"


# ---------------------------------------------------------------- nothing to run
def test_a_missing_module_is_one_line_naming_it(tmp_path: Path) -> None:
    proc = slotworker("run", "-m", "nosuchmod_sw", cwd=tmp_path)
    assert proc.returncode == 2
    assert one_line(proc) == ("slotworker run: no module named 'nosuchmod_sw' "
                              "(is it installed in this environment, or did you mean a script path?)")
    # A missing parent package is the one named.
    proc = slotworker("run", "-m", "nosuchpkg_sw.handler", cwd=tmp_path)
    assert proc.returncode == 2 and "no module named 'nosuchpkg_sw' (" in one_line(proc)
    # A module missing from a package that is there.
    proc = slotworker("run", "-m", "json.nosuch_sw", cwd=tmp_path)
    assert proc.returncode == 2 and "no module named 'json.nosuch_sw' (" in one_line(proc)


def test_a_missing_script_is_one_line_naming_it(tmp_path: Path) -> None:
    proc = slotworker("run", "nosuchfile.py", cwd=tmp_path)
    assert proc.returncode == 2
    assert one_line(proc) == "slotworker run: nosuchfile.py: no such file (give the handler script's path)"
    # Without .py it may have been meant as a module.
    proc = slotworker("run", "mypkg.handler", cwd=tmp_path)
    assert proc.returncode == 2 and one_line(proc).endswith("or -m mypkg.handler for a module)")
    (tmp_path / "folder").mkdir()
    proc = slotworker("run", "folder", cwd=tmp_path)
    assert proc.returncode == 2 and "folder: a folder without __main__.py" in one_line(proc)


def test_dash_m_given_a_file_or_a_package_without_main_says_what_to_run(tmp_path: Path) -> None:
    write_script(str(tmp_path), "handler.py", HANDLER)
    proc = slotworker("run", "-m", "handler.py", cwd=tmp_path)
    assert proc.returncode == 2
    assert one_line(proc) == ("slotworker run: -m takes a module name, not a file: "
                              "did you mean `slotworker run handler.py`?")
    (tmp_path / "workerpkg").mkdir()
    (tmp_path / "workerpkg" / "__init__.py").write_text("")
    proc = slotworker("run", "-m", "workerpkg", cwd=tmp_path)
    assert proc.returncode == 2
    assert "'workerpkg' is a package without a __main__ module" in one_line(proc)


def test_an_import_error_inside_a_module_that_is_there_keeps_its_traceback(tmp_path: Path) -> None:
    # The module is found; the module it imports is not: the user's own bug,
    # shown as Python shows it, not as a module slotworker could not find.
    write_script(str(tmp_path), "brokenmod.py", "import nosuchdep_sw\n")
    (tmp_path / "brokenpkg").mkdir()
    (tmp_path / "brokenpkg" / "__init__.py").write_text("import nosuchdep_sw\n")
    (tmp_path / "brokenpkg" / "handler.py").write_text("")
    for args in (["-m", "brokenmod"], ["-m", "brokenpkg.handler"], ["brokenmod.py"]):
        proc = slotworker("run", *args, cwd=tmp_path)
        assert proc.returncode == 1, (args, proc.stderr)
        assert "Traceback" in proc.stderr and "import nosuchdep_sw" in proc.stderr, (args, proc.stderr)
        assert proc.stderr.rstrip().endswith("ModuleNotFoundError: No module named 'nosuchdep_sw'"), proc.stderr
        assert "slotworker run:" not in proc.stderr
