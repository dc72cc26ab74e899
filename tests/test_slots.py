"""The slot counter: one suite, run against every backend.

Each behaviour test takes the ``SlotCounter`` fixture, parametrized over the
backends this interpreter should have (cython, cffi, python on CPython;
cffi, python on PyPy).  A backend that is not built is skipped, unless
SLOTWORKER_REQUIRE_NATIVE=1 (CI sets it), where it fails: a broken build of
an extension must not pass as a quiet fallback.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import sysconfig
import threading
import warnings
from typing import Callable, Dict, List, Tuple

import pytest

from slotworker import slots

REQUIRE_NATIVE = os.environ.get("SLOTWORKER_REQUIRE_NATIVE") == "1"
IS_CPYTHON = sys.implementation.name == "cpython"
# cffi refuses free-threaded CPython 3.13 (it supports 3.14t on), so setup.py
# does not build the cffi backend there.
CFFI_BUILDS = not (sysconfig.get_config_var("Py_GIL_DISABLED") and sys.version_info < (3, 14))
EXPECTED_BACKENDS = (["cython"] if IS_CPYTHON else []) + (["cffi"] if CFFI_BUILDS else []) + ["python"]
NATIVE_BACKENDS = [name for name in EXPECTED_BACKENDS if name != "python"]

SLOT_MAX = 2**31 - 1


def _load_or_skip(name: str) -> type:
    try:
        return slots.load(name)
    except ImportError as exc:
        if REQUIRE_NATIVE:
            pytest.fail(f"SLOTWORKER_REQUIRE_NATIVE=1 but {exc}")
        pytest.skip(str(exc))


@pytest.fixture(params=EXPECTED_BACKENDS)
def backend(request: pytest.FixtureRequest) -> str:
    return request.param


@pytest.fixture
def SlotCounter(backend: str) -> type:
    return _load_or_skip(backend)


# --- the build -------------------------------------------------------------


def test_native_backends_are_built_when_required() -> None:
    if not REQUIRE_NATIVE:
        pytest.skip("set SLOTWORKER_REQUIRE_NATIVE=1 to require the compiled backends")
    missing = {}
    for name in NATIVE_BACKENDS:
        try:
            slots.load(name)
        except ImportError as exc:
            missing[name] = str(exc)
    assert not missing, f"compiled backends missing: {missing}"


def test_python_backend_is_always_available() -> None:
    assert "python" in slots.available_backends()


def test_available_backends_are_listed_fastest_first() -> None:
    names = list(slots.available_backends())
    assert names == [n for n in ["cython", "cffi", "python"] if n in names]


def test_load_of_unknown_backend_raises_value_error() -> None:
    with pytest.raises(ValueError, match="unknown slot counter backend 'rust'"):
        slots.load("rust")


# --- basic behaviour -------------------------------------------------------


def test_new_counter_has_everything_free(SlotCounter: type) -> None:
    c = SlotCounter(4)
    assert (c.capacity, c.in_use, c.free) == (4, 0, 4)


def test_try_acquire_takes_one_by_default(SlotCounter: type) -> None:
    c = SlotCounter(4)
    assert c.try_acquire() == 1
    assert (c.in_use, c.free) == (1, 3)


def test_try_acquire_grants_what_is_free_when_asked_for_more(SlotCounter: type) -> None:
    c = SlotCounter(3)
    assert c.try_acquire(2) == 2
    assert c.try_acquire(2) == 1
    assert c.try_acquire(2) == 0
    assert (c.in_use, c.free) == (3, 0)


def test_try_acquire_never_grants_more_than_capacity(SlotCounter: type) -> None:
    c = SlotCounter(5)
    assert c.try_acquire(10**30) == 5  # wider than 64 bits
    assert c.try_acquire(1) == 0
    assert c.in_use == 5


def test_try_acquire_of_zero_grants_nothing(SlotCounter: type) -> None:
    c = SlotCounter(2)
    assert c.try_acquire(0) == 0
    assert c.in_use == 0


def test_zero_capacity_grants_nothing(SlotCounter: type) -> None:
    c = SlotCounter(0)
    assert c.try_acquire(1) == 0
    assert (c.capacity, c.in_use, c.free) == (0, 0, 0)


def test_release_gives_slots_back(SlotCounter: type) -> None:
    c = SlotCounter(3)
    c.try_acquire(3)
    c.release()
    assert c.in_use == 2
    c.release(2)
    assert (c.in_use, c.free) == (0, 3)


def test_release_of_zero_changes_nothing(SlotCounter: type) -> None:
    c = SlotCounter(3)
    c.try_acquire(1)
    c.release(0)
    assert c.in_use == 1


def test_release_past_in_use_raises_and_leaves_state_intact(SlotCounter: type) -> None:
    c = SlotCounter(3)
    c.try_acquire(2)
    with pytest.raises(ValueError, match=r"^cannot release 3 slots: only 2 in use$"):
        c.release(3)
    assert c.snapshot() == (3, 2)


def test_release_on_an_empty_counter_raises(SlotCounter: type) -> None:
    c = SlotCounter(3)
    with pytest.raises(ValueError, match="only 0 in use"):
        c.release()
    assert c.in_use == 0


def test_release_wider_than_64_bits_raises_without_wrapping(SlotCounter: type) -> None:
    c = SlotCounter(3)
    c.try_acquire(1)
    with pytest.raises(ValueError, match="only 1 in use"):
        c.release(2**64 + 1)  # would be 1 if it wrapped
    assert c.in_use == 1


def test_in_use_never_goes_negative(SlotCounter: type) -> None:
    c = SlotCounter(2)
    c.try_acquire(2)
    c.release(2)
    for n in (1, 2, 2**32, 2**63):
        with pytest.raises(ValueError):
            c.release(n)
    assert (c.in_use, c.free) == (0, 2)


# --- resize ----------------------------------------------------------------


def test_resize_grows_while_in_use(SlotCounter: type) -> None:
    c = SlotCounter(2)
    c.try_acquire(2)
    c.resize(5)
    assert c.snapshot() == (5, 2)
    assert c.try_acquire(10) == 3


def test_resize_below_in_use_keeps_in_use_and_frees_nothing(SlotCounter: type) -> None:
    c = SlotCounter(5)
    c.try_acquire(4)
    c.resize(2)
    assert (c.capacity, c.in_use, c.free) == (2, 4, 0)
    assert c.try_acquire(1) == 0
    c.release(2)  # 2 in use, at the new capacity: still nothing free
    assert (c.in_use, c.free) == (2, 0)
    assert c.try_acquire(1) == 0
    c.release(1)
    assert c.try_acquire(5) == 1
    assert c.snapshot() == (2, 2)


def test_resize_to_zero_while_in_use(SlotCounter: type) -> None:
    c = SlotCounter(3)
    c.try_acquire(3)
    c.resize(0)
    assert (c.capacity, c.in_use, c.free) == (0, 3, 0)
    c.release(3)
    assert c.snapshot() == (0, 0)


# --- invalid arguments -----------------------------------------------------


@pytest.mark.parametrize("capacity", [-1, -(2**70)])
def test_negative_capacity_raises_value_error(SlotCounter: type, capacity: int) -> None:
    with pytest.raises(ValueError, match=rf"^capacity must be >= 0, got {capacity}$"):
        SlotCounter(capacity)


def test_capacity_above_the_limit_raises_value_error(SlotCounter: type) -> None:
    assert SlotCounter(SLOT_MAX).capacity == SLOT_MAX
    with pytest.raises(ValueError, match=rf"^capacity must be <= {SLOT_MAX}, got {SLOT_MAX + 1}$"):
        SlotCounter(SLOT_MAX + 1)


@pytest.mark.parametrize("capacity", [-1, SLOT_MAX + 1])
def test_invalid_resize_raises_and_leaves_state_intact(SlotCounter: type, capacity: int) -> None:
    c = SlotCounter(3)
    c.try_acquire(1)
    with pytest.raises(ValueError, match="capacity must be"):
        c.resize(capacity)
    assert c.snapshot() == (3, 1)


@pytest.mark.parametrize("method", ["try_acquire", "release"])
@pytest.mark.parametrize("n", [-1, -(2**70)])
def test_negative_n_raises_value_error(SlotCounter: type, method: str, n: int) -> None:
    c = SlotCounter(3)
    c.try_acquire(2)
    with pytest.raises(ValueError, match=rf"^n must be >= 0, got {n}$"):
        getattr(c, method)(n)
    assert c.snapshot() == (3, 2)


@pytest.mark.parametrize("call", [
    lambda cls: cls(1.0),
    lambda cls: cls("3"),
    lambda cls: cls(3).try_acquire(1.0),
    lambda cls: cls(3).release(None),
    lambda cls: cls(3).resize(2.5),
])
def test_non_integer_arguments_raise_type_error(SlotCounter: type, call: Callable) -> None:
    with pytest.raises(TypeError):
        call(SlotCounter)


def test_integer_like_arguments_are_accepted(SlotCounter: type) -> None:
    class Two:
        def __index__(self) -> int:
            return 2

    c = SlotCounter(Two())
    assert c.try_acquire(Two()) == 2
    c.release(Two())
    assert c.snapshot() == (2, 0)


# --- snapshot and repr -----------------------------------------------------


def test_snapshot_is_capacity_and_in_use(SlotCounter: type) -> None:
    c = SlotCounter(7)
    c.try_acquire(3)
    snap = c.snapshot()
    assert snap == (7, 3)
    assert type(snap) is tuple and all(type(x) is int for x in snap)


def test_repr_shows_backend_capacity_and_in_use(SlotCounter: type, backend: str) -> None:
    c = SlotCounter(3)
    c.try_acquire(2)
    assert repr(c) == f"<SlotCounter backend='{backend}' capacity=3 in_use=2>"


def test_snapshot_is_consistent_while_another_thread_changes_both(SlotCounter: type) -> None:
    # The writer walks (1,0) -> (100,0) -> (100,100) -> (100,0) -> (1,0):
    # every state has in_use <= capacity, but a capacity read in a (1, _)
    # state paired with an in_use read in the (100,100) one would not.
    c = SlotCounter(1)
    cycles = 5_000
    barrier = threading.Barrier(3)
    done = threading.Event()
    torn: List[Tuple[int, int]] = []
    errors: List[BaseException] = []

    def writer() -> None:
        try:
            barrier.wait()
            for _ in range(cycles):
                c.resize(100)
                assert c.try_acquire(100) == 100
                c.release(100)
                c.resize(1)
        except BaseException as exc:  # reported by the main thread
            errors.append(exc)
        finally:
            done.set()

    def reader() -> None:
        barrier.wait()
        while not done.is_set():
            capacity, in_use = c.snapshot()
            if in_use > capacity:
                torn.append((capacity, in_use))

    threads = [threading.Thread(target=writer)] + [threading.Thread(target=reader) for _ in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors
    assert not torn, f"torn snapshots: {torn[:5]}"
    assert c.snapshot() == (1, 0)


# --- threads ---------------------------------------------------------------

STRESS_THREADS = 8
STRESS_CAPACITY = 3
# 1,000,000 acquire/release pairs in all, ~0.2 s native, ~1.5 s for the
# pure-Python backend on CPython (2 cores).  On PyPy the pure-Python backend
# is far slower here (~14 s: its contended threading.Lock hands off between
# threads through the OS), so there, and only for it, 250,000 pairs.
STRESS_PAIRS = 1_000_000
STRESS_PAIRS_PYPY_PYTHON = 250_000


def _run_threads(workers: List[Callable[[], None]]) -> List[BaseException]:
    errors: List[BaseException] = []

    def guarded(work: Callable[[], None]) -> Callable[[], None]:
        def run() -> None:
            try:
                work()
            except BaseException as exc:  # reported by the main thread
                errors.append(exc)
        return run

    threads = [threading.Thread(target=guarded(w)) for w in workers]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return errors


def test_eight_threads_never_over_grant_and_end_at_zero(SlotCounter: type, backend: str) -> None:
    c = SlotCounter(STRESS_CAPACITY)
    pairs = STRESS_PAIRS if IS_CPYTHON or backend != "python" else STRESS_PAIRS_PYPY_PYTHON
    per_thread = pairs // STRESS_THREADS
    barrier = threading.Barrier(STRESS_THREADS)
    granted: Dict[int, int] = {}

    def worker(i: int) -> Callable[[], None]:
        want = 1 + i % 2  # half the threads ask for 2, to get partial grants

        def work() -> None:
            acquire, release = c.try_acquire, c.release
            total = pairs = 0
            barrier.wait()
            while pairs < per_thread:
                got = acquire(want)
                if got:
                    # What this thread holds can never exceed what it asked
                    # for, nor can the whole counter exceed its capacity.
                    assert got <= want, (got, want)
                    assert c.in_use <= STRESS_CAPACITY
                    release(got)
                    total += got
                    pairs += 1
            granted[i] = total

        return work

    errors = _run_threads([worker(i) for i in range(STRESS_THREADS)])
    assert not errors, errors[:3]
    assert len(granted) == STRESS_THREADS
    assert c.snapshot() == (STRESS_CAPACITY, 0)


def test_threads_holding_slots_together_never_exceed_capacity(SlotCounter: type) -> None:
    # Each thread keeps what it is granted over several asks, so several
    # threads hold slots at once.  A thread's entry in `holdings` rises only
    # after a grant and drops before its release, so it never overstates
    # what the thread holds, and a copy of the list (taken atomically) sums
    # to at most what is held in all: at most capacity.
    capacity, n_threads, rounds = 5, 8, 2_000
    c = SlotCounter(capacity)
    barrier = threading.Barrier(n_threads)
    holdings = [0] * n_threads

    def worker(i: int) -> Callable[[], None]:
        def work() -> None:
            barrier.wait()
            for _ in range(rounds):
                for _ in range(3):
                    got = c.try_acquire(2)
                    assert 0 <= got <= 2
                    holdings[i] += got
                    held = sum(list(holdings))
                    assert held <= capacity, holdings
                mine, holdings[i] = holdings[i], 0
                c.release(mine)

        return work

    errors = _run_threads([worker(i) for i in range(n_threads)])
    assert not errors, errors[:3]
    assert c.snapshot() == (capacity, 0)


def test_resize_from_another_thread_never_breaks_the_count(SlotCounter: type) -> None:
    c = SlotCounter(4)
    barrier = threading.Barrier(5)
    stop = threading.Event()

    def resizer() -> None:
        barrier.wait()
        try:
            for i in range(20_000):
                c.resize(i % 6)
        finally:
            stop.set()
        c.resize(4)

    def user() -> None:
        barrier.wait()
        while not stop.is_set():
            got = c.try_acquire(2)
            assert 0 <= got <= 2
            if got:
                c.release(got)

    errors = _run_threads([resizer] + [user] * 4)
    assert not errors, errors[:3]
    assert c.snapshot() == (4, 0)


def test_c_core_holds_up_under_threads_without_the_gil(tmp_path) -> None:
    # ext/test_slotcore.c hammers the core from pthreads, with no Python
    # and so no GIL: what free-threaded CPython would do to it.
    ext = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "ext")
    compiler = shutil.which(os.environ.get("CC") or "cc") or shutil.which("gcc")
    if compiler is None or not os.path.exists(os.path.join(ext, "test_slotcore.c")):
        pytest.skip("needs a C compiler and the ext/ sources")
    exe = str(tmp_path / "test_slotcore")
    subprocess.run(
        [compiler, "-O2", "-pthread", "-I", ext, os.path.join(ext, "test_slotcore.c"),
         os.path.join(ext, "slotcore.c"), "-o", exe],
        check=True, timeout=120,
    )
    proc = subprocess.run([exe], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "failures=0" in proc.stdout


# --- the selector ----------------------------------------------------------

# Makes the compiled backends unimportable, as on a machine without them.
_HIDE_NATIVE = (
    "import sys\n"
    "sys.modules['slotworker._slots'] = None\n"
    "sys.modules['slotworker._slots_cffi'] = None\n"
)


def _python(code: str, **env: str) -> subprocess.CompletedProcess:
    """Run ``code`` in a fresh interpreter that imports this slotworker."""
    package_parent = os.path.dirname(os.path.dirname(os.path.abspath(slots.__file__)))
    full_env = {k: v for k, v in os.environ.items() if k != slots.ENV_VAR}
    full_env["PYTHONPATH"] = os.pathsep.join(
        [package_parent] + [p for p in [os.environ.get("PYTHONPATH")] if p]
    )
    full_env.update(env)
    return subprocess.run(
        [sys.executable, "-c", code], env=full_env, capture_output=True, text=True, timeout=60
    )


def test_slot_counter_is_the_class_of_the_chosen_backend() -> None:
    assert slots.SlotCounter is slots.load(slots.BACKEND)


def test_default_choice_is_the_fastest_backend_built() -> None:
    if os.environ.get(slots.ENV_VAR):
        pytest.skip(f"{slots.ENV_VAR} is set for this run")
    assert slots.BACKEND == next(iter(slots.available_backends()))


@pytest.mark.parametrize("name", EXPECTED_BACKENDS)
def test_env_var_forces_the_backend(name: str) -> None:
    _load_or_skip(name)
    proc = _python(
        "from slotworker import slots\n"
        "print(slots.BACKEND, slots.SlotCounter(2).__class__.__module__)\n",
        SLOTWORKER_SLOTS_BACKEND=name,
    )
    assert proc.returncode == 0, proc.stderr
    module = slots.load(name).__module__
    assert proc.stdout.split() == [name, module]


def test_env_var_forcing_an_unbuilt_backend_raises_import_error() -> None:
    proc = _python(
        _HIDE_NATIVE + "from slotworker import slots\nslots.BACKEND\n",
        SLOTWORKER_SLOTS_BACKEND="cffi",
    )
    assert proc.returncode != 0
    assert "ImportError: slotworker: the 'cffi' slot counter backend is not available" in proc.stderr


def test_env_var_naming_no_backend_raises_import_error() -> None:
    proc = _python(
        "from slotworker.slots import SlotCounter\n", SLOTWORKER_SLOTS_BACKEND="rust"
    )
    assert proc.returncode != 0
    assert "SLOTWORKER_SLOTS_BACKEND='rust' is not a slot counter backend" in proc.stderr


def test_without_compiled_backends_the_python_one_is_chosen() -> None:
    proc = _python(_HIDE_NATIVE + "from slotworker import slots\nprint(slots.BACKEND)\n")
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == "python"


# --- the fallback warning --------------------------------------------------


def test_fallback_warns_once_at_the_first_counter_not_at_import() -> None:
    proc = _python(
        _HIDE_NATIVE
        + "import warnings\n"
        "warnings.simplefilter('always')\n"
        "with warnings.catch_warnings(record=True) as at_import:\n"
        "    warnings.simplefilter('always')\n"
        "    from slotworker import slots\n"
        "    assert slots.BACKEND == 'python'\n"
        "assert not at_import, at_import\n"
        "with warnings.catch_warnings(record=True) as caught:\n"
        "    warnings.simplefilter('always')\n"
        "    slots.SlotCounter(1)\n"
        "    slots.SlotCounter(2)\n"
        "    assert slots.warn_if_fallback() is True\n"
        "print(len(caught), caught[0].category.__name__, caught[0].filename)\n"
        "print(caught[0].message)\n"
    )
    assert proc.returncode == 0, proc.stderr
    first, message = proc.stdout.splitlines()
    assert first == "1 RuntimeWarning <string>"  # points at the caller's line
    assert message.startswith("slotworker is running on the pure-Python slot counter")


def test_warn_if_fallback_warns_once_before_any_counter() -> None:
    proc = _python(
        _HIDE_NATIVE
        + "import warnings\n"
        "from slotworker import slots\n"
        "with warnings.catch_warnings(record=True) as caught:\n"
        "    warnings.simplefilter('always')\n"
        "    assert slots.warn_if_fallback() is True\n"
        "    assert slots.warn_if_fallback() is True\n"
        "    slots.SlotCounter(1)\n"
        "print(len(caught), caught[0].category.__name__)\n"
    )
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == "1 RuntimeWarning"


def test_forcing_the_python_backend_does_not_warn() -> None:
    proc = _python(
        "import warnings\n"
        "warnings.simplefilter('error')\n"
        "from slotworker import slots\n"
        "slots.SlotCounter(1)\n"
        "print(slots.BACKEND, slots.warn_if_fallback())\n",
        SLOTWORKER_SLOTS_BACKEND="python",
    )
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == "python False"


def test_no_fallback_warning_with_a_compiled_backend() -> None:
    if slots.BACKEND == "python":
        pytest.skip("no compiled backend here")
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert slots.warn_if_fallback() is False
        slots.SlotCounter(1)
