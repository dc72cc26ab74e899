#!/usr/bin/env python3
"""Differential check: the same handlers under runpod 1.12.0's worker and under slotworker.

Each case is one handler script. It runs twice, each time as a real worker
process against a fresh local platform (``slotworker.platform``): once with
``import runpod`` under an interpreter that has runpod installed
(``--runpod-python``), once under this interpreter, either with the one-line
change ``import slotworker as runpod`` or, for the drop-in cases (runpod's
utilities and module paths), unchanged under ``slotworker run``. The bodies each worker posts for each job
(progress, stream chunks, the final result, by job id, in order; progress
updates in any order among themselves) must match.

    python bench/differential.py [--runpod-python PATH] [--case NAME ...] [--verbose]

Prints a table ``case | runpod | slotworker | verdict`` and exits 1 on an
unexplained mismatch (or when an expected, documented difference did not
show). When the runpod interpreter cannot import runpod it prints why and
exits 0: the check is skipped, not failed.

Error tracebacks name different files in the two workers; they are replaced
by ``<traceback>`` before comparing (their type and message still count).
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import textwrap
import time
from dataclasses import dataclass, field
from typing import Any, Callable, Dict, List, Optional, Sequence, Tuple

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
DEFAULT_RUNPOD_PYTHON = os.path.join(ROOT, ".venv-runpod", "bin", "python")

#: One posted body: (kind, parsed JSON) where kind is progress, stream or done.
Post = Tuple[str, Any]


@dataclass
class Case:
    """One handler, its jobs, and what (if anything) is expected to differ."""

    name: str
    source: str  # the handler script, written with ``import runpod``
    inputs: Dict[str, Any]  # job id -> input, submitted in this order
    #: A documented, deliberate difference: why, and a check of slotworker's side.
    explained: Optional[str] = None
    slotworker_ok: Optional[Callable[[Dict[str, List[Post]]], bool]] = None
    #: Jobs runpod is expected to leave without a result (no need to wait long).
    runpod_drops: Sequence[str] = ()
    #: Whether each worker ends by itself after the jobs: (runpod, slotworker).
    exits_by_itself: Tuple[bool, bool] = (False, False)
    #: A documented difference in the process's life (not in what it posts).
    lifecycle_note: Optional[str] = None
    env: Dict[str, str] = field(default_factory=dict)
    #: Run slotworker's side unchanged under ``slotworker run`` (no import line changed).
    drop_in: bool = False


def _script(body: str, start: str = 'runpod.serverless.start({"handler": handler})') -> str:
    return "import os, time\nimport runpod\n\n" + textwrap.dedent(body).strip() + "\n\n" + start + "\n"


def _non_serialisable_ok(posts: Dict[str, List[Post]]) -> bool:
    final = [body for kind, body in posts.get("job-set", []) if kind == "done"]
    return len(final) == 1 and "not JSON-serialisable" in str(final[0].get("error", ""))


#: Handlers that use runpod's utilities and module paths, as real workers do:
#: (case, handler body, inputs, extra environment). slotworker runs them
#: unchanged under ``slotworker run``.
DROP_IN: List[Tuple[str, str, Dict[str, Any], Dict[str, str]]] = [
    ("rp_validator", """
        from runpod.serverless.utils.rp_validator import validate

        SCHEMA = {"prompt": {"type": str, "required": True},
                  "steps": {"type": int, "required": False, "default": 20,
                            "constraints": lambda steps: 0 < steps <= 100},
                  "scale": {"type": float, "required": False, "default": 7.5}}

        def handler(job):
            result = validate(job["input"], SCHEMA)
            if "errors" in result:
                return {"error": result["errors"]}
            return result["validated_input"]
        """, {"job-valid": {"prompt": "a cat"}, "job-valid-all": {"prompt": "x", "steps": 50, "scale": 2.0},
              "job-missing": {"steps": 3}, "job-bad-type": {"prompt": 1, "steps": "many"},
              "job-constraint": {"prompt": "x", "steps": 1000}, "job-extra": {"prompt": "x", "seed": 1}}, {}),
    ("rp_logger-paths", """
        from runpod import RunPodLogger
        from runpod.serverless.modules.rp_logger import RunPodLogger as ModuleLogger

        log = RunPodLogger()

        def handler(job):
            log.info("info line", job["id"])
            log.warn("warn line", request_id=job["id"])
            log.log("logged", "ERROR", job_id=job["id"])
            log.secret("token", "abcdef")
            return {"same_class": RunPodLogger is ModuleLogger, "one_object": RunPodLogger() is log,
                    "methods": sorted(m for m in ("debug", "info", "warn", "error", "trace", "tip", "secret",
                                                  "set_level", "log") if callable(getattr(log, m, None)))}
        """, {"job-log": {}}, {}),
    ("rp_cleanup", """
        from runpod.serverless.utils import rp_cleanup

        def handler(job):
            for folder in ("input_objects", "output_objects", "job_files", "keep_me"):
                os.makedirs(folder, exist_ok=True)
            with open("output.zip", "wb") as handle:
                handle.write(b"zip")
            rp_cleanup.clean()
            return {name: os.path.exists(name) for name in
                    ("input_objects", "output_objects", "job_files", "output.zip", "keep_me")}
        """, {"job-clean": {}}, {}),
    ("rp_upload-local", """
        import re
        from runpod.serverless.utils import rp_upload, upload_file_to_bucket, upload_in_memory_object

        def handler(job):
            with open("picture.png", "wb") as handle:
                handle.write(b"not really a png")
            image = rp_upload.upload_image(job["id"], "picture.png")  # named by a random id
            return {"image": re.sub(r"/[0-9a-f]{8}[.]", "/<id>.", image),
                    "file": upload_file_to_bucket("named.bin", "picture.png"),
                    "memory": upload_in_memory_object("mem.bin", b"bytes in memory")}
        """, {"job-upload": {}}, {}),
    ("rp_download", """
        import http.server, re, threading
        from runpod.serverless.utils import rp_download, download_files_from_urls

        class Files(http.server.BaseHTTPRequestHandler):
            def do_GET(self):
                body = b"hello from loopback"
                self.send_response(200)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *args):
                pass

        server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Files)
        threading.Thread(target=server.serve_forever, daemon=True).start()
        URL = "http://127.0.0.1:%d/files/greeting.txt" % server.server_address[1]

        def shape(value):
            # file names carry a random uuid, paths the worker's folder: compare their shape
            text = str(value).replace(os.getcwd(), "<cwd>")
            return re.sub(r"[0-9a-f]{32}", "<uuid>", re.sub(r"[0-9a-f-]{36}", "<uuid>", text))

        def handler(job):
            os.environ["RUNPOD_ALLOW_PRIVATE_DOWNLOAD_URLS"] = "true" if job["input"]["allow"] else "false"
            try:
                one = rp_download.file(URL)
                with open(one["file_path"], "rb") as handle:
                    content = handle.read().decode()
                listed = download_files_from_urls(job["id"], [URL])
                return {"file": shape(one), "content": content, "listed": shape(listed)}
            except Exception as exc:
                return {"refused": type(exc).__name__}
        """, {"job-download": {"allow": True}, "job-refused": {"allow": False}}, {}),
    ("rp_debugger-timers", """
        from runpod.serverless.utils.rp_debugger import FunctionTimer, LineTimer, get_debugger_output

        @FunctionTimer
        def infer(x):
            with LineTimer("tokenize"):
                return x * 2

        def handler(job):
            value = infer(job["input"]["x"])
            names = sorted(entry["name"] for entry in get_debugger_output()["timestamps"])
            return {"value": value, "timed": names}
        """, {"job-timer-1": {"x": 1}, "job-timer-2": {"x": 2}}, {}),
    ("rp_cuda-and-modules", """
        from runpod.serverless.utils import rp_cuda
        from runpod.serverless.modules import rp_http
        import runpod.serverless.utils

        def handler(job):
            return {"cuda": rp_cuda.is_available(), "rp_http": callable(rp_http.send_result),
                    "utils": sorted(n for n in ("download_files_from_urls", "upload_file_to_bucket",
                                                "upload_in_memory_object")
                                    if callable(getattr(runpod.serverless.utils, n)))}
        """, {"job-cuda": {}}, {}),
]

CASES: List[Case] = [
    Case("plain", _script("""
        def handler(job):
            kind = job["input"]["kind"]
            return {"dict": {"answer": 42}, "scalar": "forty-two", "bool": True, "none": None,
                    "empty": {}, "list": [1, 2.5, "x"], "nested": {"a": {"b": [None, False]}}}[kind]
        """), {f"job-{k}": {"kind": k} for k in ("dict", "scalar", "bool", "none", "empty", "list", "nested")}),
    Case("error-raising", _script("""
        def handler(job):
            raise ValueError("boom: " + job["input"]["why"])
        """), {"job-raise": {"why": "on purpose"}}),
    Case("returning-error", _script("""
        def handler(job):
            if job["input"]["partial"]:
                return {"error": "bad thing", "partial": 1}
            return {"error": "only an error"}
        """), {"job-error-partial": {"partial": True}, "job-error-only": {"partial": False}}),
    Case("generator", _script("""
        def handler(job):
            for i in range(job["input"]["n"]):
                yield {"chunk": i}
        """), {"job-gen": {"n": 3}, "job-gen-empty": {"n": 0}}),
    Case("aggregate-stream", _script("""
        def handler(job):
            for i in range(job["input"]["n"]):
                yield "token-%d" % i
        """, 'runpod.serverless.start({"handler": handler, "return_aggregate_stream": True})'),
         {"job-agg": {"n": 5}}),
    Case("generator-raising", _script("""
        def handler(job):
            yield {"chunk": 0}
            raise RuntimeError("stream broke")
        """, 'runpod.serverless.start({"handler": handler, "return_aggregate_stream": True})'),
         {"job-gen-raise": {}}),
    Case("generator-error-chunk", _script("""
        def handler(job):
            yield {"chunk": 0}
            yield {"error": "bad chunk"}
            yield {"chunk": 2}
        """, 'runpod.serverless.start({"handler": handler, "return_aggregate_stream": True})'),
         {"job-gen-error": {}}),
    Case("async", _script("""
        import asyncio

        async def handler(job):
            await asyncio.sleep(0.01)
            return {"async": job["input"]["n"] * 2}
        """), {"job-async": {"n": 21}}),
    Case("concurrency_modifier", _script("""
        def handler(job):
            time.sleep(0.2)
            return {"n": job["input"]["n"]}
        """, 'runpod.serverless.start({"handler": handler, "concurrency_modifier": lambda current: 3})'),
         {f"job-c{n}": {"n": n} for n in range(6)}),
    Case("refresh_worker", _script("""
        def handler(job):
            return {"answer": 1, "refresh_worker": True}
        """), {"job-refresh": {}}, exits_by_itself=(False, True),
         lifecycle_note=("runpod only posts stopPod and keeps taking until the platform stops it; "
                         "slotworker also shuts itself down")),
    Case("refresh_worker-config", _script("""
        def handler(job):
            return {"answer": 2}
        """, 'runpod.serverless.start({"handler": handler, "refresh_worker": True})'),
         {"job-refresh-config": {}}, exits_by_itself=(True, True)),
    Case("large-output", _script("""
        def handler(job):
            return {"blob": "x" * job["input"]["size"], "tail": "é" * 1000}
        """), {"job-large": {"size": 1_000_000}}),
    Case("unicode", _script("""
        def handler(job):
            return {"text": "naïve 日本 " + job["input"]["s"], "emoji": "\\U0001F600", "nul": "a\\u0000b"}
        """), {"job-unicode": {"s": "ß→∑"}}),
    Case("progress_update", _script("""
        def handler(job):
            runpod.serverless.progress_update(job, "half way")
            runpod.serverless.progress_update(job, {"percent": 75})
            time.sleep(0.3)
            return {"answer": 2}
        """), {"job-progress": {}}),
    Case("non-serialisable-output", _script("""
        def handler(job):
            return {"a_set": {1, 2, 3}}
        """), {"job-set": {}},
         explained=("runpod logs the TypeError and posts nothing (the job is never finished); "
                    "slotworker posts an error result"),
         slotworker_ok=_non_serialisable_ok, runpod_drops=("job-set",)),
]
CASES += [Case(name, _script(body), inputs, drop_in=True, env=env) for name, body, inputs, env in DROP_IN]
# The returned-dict conventions, once more through `slotworker run` with the script unchanged.
CASES += [dataclasses.replace(case, name=case.name + " (run)", drop_in=True)
          for case in CASES if case.name in ("progress_update", "refresh_worker", "generator")]


# -- running one worker ---------------------------------------------------------------
def _import_platform() -> Any:
    try:
        from slotworker.platform import Platform
    except ImportError:  # run from a checkout without installing
        sys.path.insert(0, os.path.join(ROOT, "src"))
        from slotworker.platform import Platform
    return Platform


def _normalise(body: Any) -> Any:
    """Replace traceback text, which names each worker's own files."""
    if not isinstance(body, dict) or not isinstance(body.get("error"), str):
        return body
    body = dict(body)
    error = body["error"]
    try:
        info = json.loads(error)
    except ValueError:
        info = None
    if isinstance(info, dict) and "error_traceback" in info:
        info["error_traceback"] = "<traceback>"
        body["error"] = json.dumps(info, sort_keys=True)
    elif "\ntraceback: " in error:
        body["error"] = error.split("\ntraceback: ", 1)[0] + "\ntraceback: <traceback>"
    return body


@dataclass
class Run:
    """What one worker posted, by job id."""

    posts: Dict[str, List[Post]]
    raw: Dict[str, List[bytes]]
    exit_code: Optional[int]
    log_path: str
    error: Optional[str] = None


def run_worker(case: Case, command: List[str], import_line: str, workdir: str, label: str,
               timeout: float, exits: bool) -> Run:
    """Run ``case`` as ``command + [script]`` against a fresh platform; what it posted."""
    Platform = _import_platform()
    script = os.path.join(workdir, f"{case.name}-{label}.py")
    with open(script, "w", encoding="utf-8") as handle:
        handle.write(case.source.replace("import runpod\n", import_line + "\n", 1))
    log_path = os.path.join(workdir, f"{case.name}-{label}.log")
    # Each run in a folder of its own: handlers write files where they run.
    case_dir = os.path.join(workdir, f"{case.name}-{label}")
    os.makedirs(case_dir, exist_ok=True)
    with Platform(long_poll=0.2) as platform:
        for job_id, job_input in case.inputs.items():
            platform.submit(job_input, job_id=job_id)
        env = {k: v for k, v in os.environ.items() if not k.startswith("RUNPOD_")}
        # runpod pings only with RUNPOD_AI_API_KEY and RUNPOD_POD_ID set; both are.
        env.update(platform.worker_env("w1"), PYTHONUNBUFFERED="1", **case.env)
        error = None
        with open(log_path, "w", encoding="utf-8") as log:
            proc = subprocess.Popen([*command, script], env=env, cwd=case_dir, stdout=log,
                                    stderr=subprocess.STDOUT)
            try:
                must = [j for j in case.inputs if j not in case.runpod_drops]
                if not platform.wait_final(must, timeout=timeout):
                    error = "timed out waiting for results"
                if case.runpod_drops:
                    # A dropped job stays in progress; give a result time to arrive anyway.
                    platform.wait_final(list(case.runpod_drops), timeout=3.0)
                if exits:
                    try:
                        proc.wait(timeout=15)
                    except subprocess.TimeoutExpired:
                        error = error or "the worker did not exit by itself"
                else:
                    time.sleep(0.5)  # a worker that should keep running shows it here
                    if proc.poll() is not None:
                        error = error or f"the worker exited by itself (code {proc.returncode})"
                if proc.poll() is None:
                    # runpod's worker never exits by itself: SIGTERM it once its jobs are final.
                    proc.send_signal(signal.SIGTERM)
                    try:
                        proc.wait(timeout=30)
                    except subprocess.TimeoutExpired:
                        proc.kill()
                        proc.wait()
            finally:
                if proc.poll() is None:
                    proc.kill()
                    proc.wait()
        posts: Dict[str, List[Post]] = {job_id: [] for job_id in case.inputs}
        raw: Dict[str, List[bytes]] = {job_id: [] for job_id in case.inputs}
        for event in platform.events:
            if event.kind not in ("done", "progress", "stream") or event.status != 200:
                continue
            job_id = event.job_ids[0] if event.job_ids else "?"
            body = json.loads(event.body)
            posts.setdefault(job_id, []).append((event.kind, _normalise(body)))
            raw.setdefault(job_id, []).append(event.body.encode("utf-8"))
    return Run(posts, raw, proc.returncode, log_path, error)


# -- comparing and reporting ------------------------------------------------------------
def summarise(run: Run) -> str:
    """A short description of what a worker posted, for the table."""
    if run.error and not any(run.posts.values()):
        return run.error
    shapes: Dict[str, List[int]] = {}
    for job_id, posts in run.posts.items():
        kinds: Dict[str, int] = {}
        for kind, _ in posts:
            kinds[kind] = kinds.get(kind, 0) + 1
        shape = "+".join(f"{n} {k}" if n > 1 else k for k, n in kinds.items()) or "no result"
        shapes.setdefault(shape, []).append(sum(len(b) for b in run.raw.get(job_id, [])))
    parts = []
    for shape, sizes in shapes.items():
        count = f"{len(sizes)} x " if len(sizes) > 1 else ""
        total = sum(sizes)
        parts.append(f"{count}{shape}, {_size(total)}" if total else f"{count}{shape}")
    return "; ".join(parts)


def _size(n: int) -> str:
    return f"{n / 1e6:.1f} MB" if n >= 100_000 else f"{n} B"


def canonical(posts: Dict[str, List[Post]]) -> Dict[str, Any]:
    """Posts by job id as compared: stream chunks and the final result in order;
    progress updates as a sorted list, because runpod sends each from a thread
    of its own, so their order among themselves is not defined."""
    out: Dict[str, Any] = {}
    for job_id, items in posts.items():
        progress = sorted(json.dumps(body, sort_keys=True) for kind, body in items if kind == "progress")
        out[job_id] = (progress, [(kind, body) for kind, body in items if kind != "progress"])
    return out


def compare(case: Case, theirs: Run, ours: Run) -> Tuple[bool, str]:
    """(ok, verdict) for one case."""
    if ours.error:
        return False, f"MISMATCH: slotworker: {ours.error}"
    if theirs.error:
        return False, f"MISMATCH: runpod: {theirs.error} (see {theirs.log_path})"
    same = canonical(theirs.posts) == canonical(ours.posts)
    if case.explained:
        if same:
            return False, f"UNEXPECTED MATCH: documented difference did not show ({case.explained})"
        if case.slotworker_ok is not None and not case.slotworker_ok(ours.posts):
            return False, "MISMATCH: slotworker's side is not the documented one"
        return True, f"explained: {case.explained}"
    if same:
        if case.lifecycle_note:
            return True, f"match; explained: {case.lifecycle_note}"
        return True, "match"
    mine, yours = canonical(ours.posts), canonical(theirs.posts)
    for job_id in case.inputs:
        a, b = theirs.posts.get(job_id, []), ours.posts.get(job_id, [])
        if yours.get(job_id) != mine.get(job_id):
            return False, f"MISMATCH on {job_id}: runpod {json.dumps(a)[:200]} vs slotworker {json.dumps(b)[:200]}"
    return False, "MISMATCH: posts for unknown job ids"


def runpod_available(python: str) -> Optional[str]:
    """None when ``python`` can import runpod's worker; otherwise why not."""
    if not os.path.exists(python):
        return f"{python} does not exist"
    try:
        proc = subprocess.run([python, "-c", "import runpod.serverless, runpod; print(runpod.__version__)"],
                              capture_output=True, text=True, timeout=120)
    except (OSError, subprocess.TimeoutExpired) as exc:
        return f"{python} could not be run: {exc}"
    if proc.returncode != 0:
        last = (proc.stderr.strip().splitlines() or ["?"])[-1]
        return f"{python} cannot import runpod: {last}"
    version = proc.stdout.strip()
    if version != "1.12.0":
        print(f"note: {python} has runpod {version}, not 1.12.0", file=sys.stderr)
    return None


def table(rows: List[Tuple[str, str, str, str]]) -> str:
    header = ("case", "runpod", "slotworker", "verdict")
    widths = [max(len(r[i]) for r in rows + [header]) for i in range(4)]
    widths[3] = min(widths[3], 120)
    lines = [" | ".join(h.ljust(w) for h, w in zip(header, widths)).rstrip(),
             "-|-".join("-" * w for w in widths)]
    lines += [" | ".join(c.ljust(w) for c, w in zip(row, widths)).rstrip() for row in rows]
    return "\n".join(lines)


def _interpreter(python: str) -> str:
    """``python`` as an absolute path (a bare name is looked up on PATH); symlinks kept."""
    if os.sep not in python:
        return shutil.which(python) or python
    return os.path.abspath(python)


def main(argv: Optional[List[str]] = None) -> int:
    """Run every case under both workers; the exit code (0: all match or explained)."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runpod-python", default=os.environ.get("SLOTWORKER_RUNPOD_PYTHON", DEFAULT_RUNPOD_PYTHON),
                        help="an interpreter with runpod==1.12.0 installed (default: %(default)s)")
    parser.add_argument("--slotworker-python", default=sys.executable,
                        help="an interpreter with slotworker installed (default: this one)")
    parser.add_argument("--case", action="append", help="run only this case (repeatable)")
    parser.add_argument("--timeout", type=float, default=60.0, help="seconds to wait for a case's results")
    parser.add_argument("--verbose", action="store_true", help="print the posted bodies of every case")
    args = parser.parse_args(argv)
    # Workers run in a temporary directory: make relative interpreter paths absolute.
    args.runpod_python = _interpreter(args.runpod_python)
    args.slotworker_python = _interpreter(args.slotworker_python)

    why = runpod_available(args.runpod_python)
    if why is not None:
        print(f"SKIPPED: differential check not run: {why}")
        return 0
    cases = [c for c in CASES if not args.case or c.name in args.case]
    if not cases:
        parser.error(f"no such case; cases: {', '.join(c.name for c in CASES)}")

    rows: List[Tuple[str, str, str, str]] = []
    failed = 0
    started = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="slotworker-differential-") as workdir:
        for case in cases:
            theirs = run_worker(case, [args.runpod_python], "import runpod", workdir, "runpod",
                                args.timeout, case.exits_by_itself[0])
            if case.drop_in:
                ours = run_worker(case, [args.slotworker_python, "-m", "slotworker", "run"], "import runpod",
                                  workdir, "slotworker", args.timeout, case.exits_by_itself[1])
            else:
                ours = run_worker(case, [args.slotworker_python], "import slotworker as runpod", workdir,
                                  "slotworker", args.timeout, case.exits_by_itself[1])
            ok, verdict = compare(case, theirs, ours)
            failed += not ok
            rows.append((case.name, summarise(theirs), summarise(ours), verdict))
            if args.verbose or not ok:
                for label, run in (("runpod", theirs), ("slotworker", ours)):
                    print(f"--- {case.name} / {label} (exit {run.exit_code}):")
                    for job_id, posts in run.posts.items():
                        print(f"    {job_id}: {json.dumps(posts, ensure_ascii=False)[:400]}")
                    if not ok:
                        with open(run.log_path, encoding="utf-8", errors="replace") as log:
                            tail = log.read()[-1500:]
                        print(textwrap.indent(tail, "    | "))
    print(table(rows))
    print(f"\n{len(cases)} cases in {time.monotonic() - started:.1f}s: "
          f"{len(cases) - failed} match or explained, {failed} unexplained")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
