"""``rp_cleanup``, ``rp_cuda`` and ``rp_debugger`` against runpod 1.12.0's."""

from __future__ import annotations

import os
from typing import Any, List

import pytest

from slotworker.serverless.utils import rp_cleanup, rp_cuda, rp_debugger

TREE = ["input_objects/a", "output_objects", "job_files/x/y", "jobs/j", "local_upload", "simulated_uploaded",
        "mine", "keep"]


def build(root: str) -> None:
    for folder in TREE:
        os.makedirs(os.path.join(root, folder), exist_ok=True)
        with open(os.path.join(root, folder, "f"), "w") as out:
            out.write("x")
    with open(os.path.join(root, "output.zip"), "w") as out:
        out.write("PK")


def remaining(root: str) -> List[str]:
    return sorted(os.path.relpath(os.path.join(d, n), root) for d, dirs, files in os.walk(root)
                  for n in dirs + files)


@pytest.mark.parametrize("args", [(), (None,), (["mine", "missing"],), ([],)])
def test_clean_leaves_what_runpod_leaves(runpod_ref: Any, tmp_path: Any, monkeypatch: pytest.MonkeyPatch,
                                         args: Any) -> None:
    theirs, ours = str(tmp_path / "runpod"), str(tmp_path / "ours")
    build(theirs)
    build(ours)
    runpod_ref.call("runpod.serverless.utils.rp_cleanup", "clean", *args, cwd=theirs)
    monkeypatch.chdir(ours)
    rp_cleanup.clean(*args)
    assert remaining(ours) == remaining(theirs)


@pytest.mark.parametrize("script", [
    "echo '| NVIDIA-SMI 535.104.05 |'", "echo 'NVIDIA-SMI has failed'; exit 9", "echo other",
    "printf '\\377 NVIDIA-SMI'", None,
])
def test_is_available_answers_as_runpod(runpod_ref: Any, tmp_path: Any, monkeypatch: pytest.MonkeyPatch,
                                        script: Any) -> None:
    if script is not None:
        tool = tmp_path / "nvidia-smi"
        tool.write_text(f"#!/bin/sh\n{script}\n")
        tool.chmod(0o755)
    theirs = runpod_ref.call("runpod.serverless.utils.rp_cuda", "is_available", env={"PATH": str(tmp_path)})
    monkeypatch.setenv("PATH", str(tmp_path))
    assert rp_cuda.is_available() is theirs


def test_debugger_output_has_runpods_keys_and_values(runpod_ref: Any) -> None:
    rp_debugger.clear_debugger_output()
    theirs = runpod_ref.call("runpod.serverless.utils.rp_debugger", "get_debugger_output")
    ours = rp_debugger.get_debugger_output()
    assert list(ours) == list(theirs) and ours["timestamps"] == theirs["timestamps"] == []
    for key, value in theirs["system_info"].items():
        assert ours["system_info"][key] == value, key
