"""Every public name of runpod 1.12.0's utility modules exists at the same path
in slotworker, with the same parameters (names, kinds, defaults).

Names left out on purpose are listed in ``NOT_PROVIDED`` with the reason.
slotworker may have more names; it may not have fewer.
"""

from __future__ import annotations

import importlib
import inspect
from typing import Any, Dict, List, Tuple

import pytest

from runpod_server import api, describe, parameters

MODULES = [
    "serverless.utils",
    "serverless.utils.rp_validator",
    "serverless.utils.rp_cleanup",
    "serverless.utils.rp_download",
    "serverless.utils.rp_upload",
    "serverless.utils.rp_debugger",
    "serverless.utils.rp_cuda",
    "serverless.modules.rp_logger",
    "serverless.modules.rp_http",
]

NOT_PROVIDED: Dict[Tuple[str, str], str] = {
    ("serverless.utils", "VolumeCache"): "the network-volume model cache is not part of a worker; "
                                         "importing it raises an ImportError that says so",
    ("serverless.utils.rp_upload", "FMT"): "the format of the logging.basicConfig() runpod calls at "
                                           "import; slotworker configures no logging at import",
}


def describe_one(value: Any) -> Dict[str, Any]:
    """One value described as ``runpod_server.describe`` describes module names."""
    if inspect.isclass(value):
        return {"kind": "class", "members": api(value)}
    if callable(value):
        return {"kind": "callable", "params": parameters(value)}
    return {"kind": "value"}


def differences(module: str, theirs: Dict[str, Any]) -> List[str]:
    mod = importlib.import_module(f"slotworker.{module}")
    mine = describe(mod)
    found = []
    for name, spec in theirs.items():
        if (module, name) in NOT_PROVIDED:
            continue
        if name not in mine:
            try:  # a name the module computes on first use (module __getattr__)
                mine[name] = describe_one(getattr(mod, name))
            except AttributeError:
                found.append(f"{name}: missing")
                continue
        if spec["kind"] != mine[name]["kind"]:
            found.append(f"{name}: {spec['kind']} in runpod, {mine[name]['kind']} here")
        elif spec["kind"] == "callable" and spec["params"] != mine[name]["params"]:
            found.append(f"{name}: parameters {spec['params']} in runpod, {mine[name]['params']} here")
        elif spec["kind"] == "class":
            for member, params in spec["members"].items():
                if member not in mine[name]["members"]:
                    found.append(f"{name}.{member}: missing")
                elif params != mine[name]["members"][member]:
                    found.append(f"{name}.{member}: parameters {params} in runpod, "
                                 f"{mine[name]['members'][member]} here")
    return found


@pytest.mark.parametrize("module", MODULES)
def test_runpods_public_names_are_provided(runpod_ref: Any, module: str) -> None:
    theirs = runpod_ref.describe(f"runpod.{module}")
    assert theirs, "the reference found no names: the comparison would be empty"
    assert differences(module, theirs) == []


def test_the_modules_reference_names_that_exist(runpod_ref: Any) -> None:
    # The exceptions listed above must still be real runpod names.
    for module, name in NOT_PROVIDED:
        assert name in runpod_ref.describe(f"runpod.{module}")


def test_runpod_logger_has_a_level_attribute(runpod_ref: Any) -> None:
    from slotworker.serverless.modules.rp_logger import RunPodLogger

    assert "level" in runpod_ref.api("runpod.serverless.modules.rp_logger", "RunPodLogger")
    assert isinstance(RunPodLogger().level, str)
