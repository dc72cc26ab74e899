"""The local console in a real browser: headless Chromium driven by selenium,
against a real Platform on loopback with a real worker on a thread.

Needs Debian's `chromium` and `chromium-driver` (`.ci/run` installs them).
Without them these tests fail when CI is set, and are skipped otherwise.
A screenshot of each state goes to the test's tmp_path; with
SLOTWORKER_UPDATE_SCREENSHOT=1 the burst's also goes to docs/console.png,
the README's picture.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import threading
import time
from pathlib import Path
from typing import Any, Callable, Dict, Iterator, List, Optional

import pytest

from slotworker.platform import Platform

from support import ROOT, WorkerThread

CHROMIUM = os.environ.get("SLOTWORKER_CHROMIUM", "/usr/bin/chromium")
CHROMEDRIVER = os.environ.get("SLOTWORKER_CHROMEDRIVER", "/usr/bin/chromedriver")
WIDTH, HEIGHT = 1280, 800
SLOTS = 4
WAIT = 20.0  # generous: a loaded CI machine, PyPy
README_SCREENSHOT = os.path.join(ROOT, "docs", "console.png")


def _missing() -> Optional[str]:
    """Why the browser tests cannot run here, or None."""
    try:
        import selenium  # noqa: F401
    except ImportError:
        return "selenium is not installed (pip install '.[test]')"
    for path, package in ((CHROMIUM, "chromium"), (CHROMEDRIVER, "chromium-driver")):
        if not (os.path.isfile(path) and os.access(path, os.X_OK)):
            return f"{path} not found (Debian package {package})"
    return None


#: Jobs with {"hold": ...} wait for this before they finish.
RELEASE = threading.Event()


def handler(job: Dict[str, Any]) -> Any:
    """The worker's handler: {"sleep": s} sleeps, {"hold": x} waits for
    RELEASE, {"fail": m} raises m, a string comes back as it is, anything
    else as {"echo": input}."""
    value = job["input"]
    if isinstance(value, dict) and "hold" in value:
        RELEASE.wait(WAIT)
    if isinstance(value, dict) and "sleep" in value:
        time.sleep(float(value["sleep"]))
    if isinstance(value, dict) and "fail" in value:
        raise RuntimeError(value["fail"])
    return value if isinstance(value, str) else {"echo": value}


# ---------------------------------------------------------------- fixtures
@pytest.fixture(scope="module")
def driver() -> Iterator[Any]:
    missing = _missing()
    if missing:
        if os.environ.get("CI"):
            pytest.fail(f"browser tests cannot run: {missing}. In CI these are required: "
                        "`.ci/run` installs chromium and chromium-driver with apt-get.", pytrace=False)
        pytest.skip(f"browser tests skipped: {missing}")
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    options = webdriver.ChromeOptions()
    options.binary_location = CHROMIUM
    for arg in ("--headless=new", "--no-sandbox", "--disable-gpu", f"--window-size={WIDTH},{HEIGHT}",
                "--disable-dev-shm-usage"):
        options.add_argument(arg)
    options.set_capability("goog:loggingPrefs", {"browser": "ALL"})
    browser = webdriver.Chrome(service=Service(CHROMEDRIVER), options=options)
    try:
        # The window's size includes what a headed browser would draw around
        # the page; this makes the page itself WIDTH x HEIGHT.
        browser.execute_cdp_cmd("Emulation.setDeviceMetricsOverride",
                                {"width": WIDTH, "height": HEIGHT, "deviceScaleFactor": 1, "mobile": False})
        yield browser
    finally:
        browser.quit()


@pytest.fixture(scope="module")
def served() -> Iterator[Platform]:
    """A platform with one real worker of SLOTS slots (take cost 0)."""
    with Platform(take_cost=0.0, long_poll=0.5) as platform:
        # Pinned to "drain", a worker that asks only for its free slots, and
        # holding each slot until its result is in, so that its slot
        # estimate is exact (see console.timeline).
        with WorkerThread(platform, handler, concurrency=SLOTS, take_policy="drain", post_backlog=0):
            yield platform


@pytest.fixture
def page(driver: Any, served: Platform) -> Iterator[Any]:
    """The console opened fresh; the browser leaves it before the platform closes."""
    driver.get(served.url + "/")
    driver.execute_script("localStorage.clear()")
    driver.get(served.url + "/")
    driver.get_log("browser")  # start each test with an empty log
    wait_js(driver, "return document.getElementById('conn').dataset.state === 'live'")
    yield driver
    driver.get("about:blank")


# ---------------------------------------------------------------- helpers
def wait_js(driver: Any, script: str, *args: Any, timeout: float = WAIT) -> Any:
    """Wait until `script` (run in the page) returns something truthy; return it."""
    from selenium.webdriver.support.ui import WebDriverWait

    return WebDriverWait(driver, timeout, poll_frequency=0.05).until(
        lambda d: d.execute_script(script, *args),
        message=f"page never satisfied: {script}")


def shot(driver: Any, tmp_path: Path, name: str) -> Path:
    path = tmp_path / f"{name}.png"
    assert driver.save_screenshot(str(path)), path
    return path


def no_console_errors(driver: Any) -> None:
    severe = [e for e in driver.get_log("browser") if e.get("level") == "SEVERE"]
    assert severe == [], severe


def submit(driver: Any, text: str, route: str = "run", copies: int = 1) -> Dict[str, Any]:
    """Fill and send the form; the answer the page shows, parsed."""
    from selenium.webdriver.common.by import By

    box = driver.find_element(By.ID, "input")
    box.clear()
    box.send_keys(text)
    driver.find_element(By.CSS_SELECTOR, f"input[name=route][value={route}]").click()
    copies_box = driver.find_element(By.ID, "copies")
    copies_box.clear()
    copies_box.send_keys(str(copies))
    driver.execute_script("document.getElementById('answer').textContent = ''")
    driver.find_element(By.ID, "submit").click()
    text = wait_js(driver, "const a = document.getElementById('answer');"
                           "return !a.hidden && a.textContent")
    return json.loads(text)


def row_status(driver: Any, job_id: str, status: str) -> Any:
    """Wait for the job's row to show `status`; return the row's cell texts."""
    return wait_js(driver, """
        const row = document.querySelector(`#jobs tr[data-id="${arguments[0]}"]`);
        if (!row || row.dataset.status !== arguments[1]) return null;
        const out = row.querySelector('td.out');
        const text = (selector) => Array.from(row.querySelectorAll(selector)).map(n => n.textContent).join('');
        return {status: text('td.status'), worker: text('td.worker'), output: text('td.out .output'),
                error: text('td.out .err'), elements: out.querySelectorAll('*:not(span)').length};""",
                   job_id, status)


# ---------------------------------------------------------------- tests
def test_a_job_submitted_through_the_form_completes_with_its_output(page: Any, served: Platform,
                                                                     tmp_path: Path) -> None:
    answer = submit(page, '{"name": "console"}')
    assert answer["status"] == "IN_QUEUE"
    cells = row_status(page, answer["id"], "COMPLETED")
    assert cells["output"] == '{"echo": {"name": "console"}}'
    assert cells["worker"] == "w1" and cells["status"] == "completed"
    assert served.status(answer["id"])["output"] == {"echo": {"name": "console"}}
    shot(page, tmp_path, "form-completed")

    # Three copies at once; and the last inputs are kept across a reload.
    submit(page, '{"copy": true}', copies=3)
    wait_js(page, "return Array.from(document.querySelectorAll('#jobs tr[data-status=COMPLETED] .output'))"
                  ".filter(n => n.textContent.includes('copy')).length === 3")
    page.refresh()
    assert wait_js(page, "return document.getElementById('input').value") == '{"copy": true}'
    recent = page.execute_script("return Array.from(document.querySelectorAll('#recent option'))"
                                 ".map(o => o.textContent)")
    assert recent[1:] == ['{"copy": true}', '{"name": "console"}']
    no_console_errors(page)


def test_output_holding_markup_shows_as_text_and_runs_nothing(page: Any, served: Platform, tmp_path: Path) -> None:
    script = "<script>window.__pwned=1</script>"
    answer = submit(page, json.dumps(script), route="runsync")
    assert answer["status"] == "COMPLETED" and answer["output"] == script
    cells = row_status(page, answer["id"], "COMPLETED")
    assert cells["output"] == script and cells["elements"] == 0
    # The /runsync answer is shown as text too.
    assert script in page.execute_script("return document.getElementById('answer').textContent")

    image = "<img src=x onerror=window.__pwned=2>"
    failed = submit(page, json.dumps({"fail": image}))
    cells = row_status(page, failed["id"], "FAILED")
    assert cells["error"] == "error: RuntimeError: " + image and cells["elements"] == 0

    shot(page, tmp_path, "markup-as-text")

    # The detail view shows the output and the error message as text as well.
    page.execute_script(f"document.querySelector('#jobs tr[data-id=\"{failed['id']}\"]').click()")
    wait_js(page, "return document.getElementById('detail').open && "
                  "document.getElementById('detail-body').textContent.includes(arguments[0])", image)
    shot(page, tmp_path, "markup-detail")
    assert page.execute_script("return document.querySelectorAll('#jobs script, #jobs img, #detail script, "
                               "#detail img, #answer *').length") == 0
    assert page.execute_script("return typeof window.__pwned") == "undefined"
    no_console_errors(page)


def test_a_burst_fills_the_slots_on_the_chart(page: Any, served: Platform, tmp_path: Path) -> None:
    page.execute_script("const w = document.getElementById('window'); w.value = '10';"
                        "w.dispatchEvent(new Event('change'))")
    submit(page, '{"sleep": 0.1, "burst": true}')
    ids = [served.submit({"sleep": 0.1, "burst": i}) for i in range(4 * SLOTS)]
    assert served.wait_final(ids, timeout=WAIT)
    # The page's own chart data: the in-progress line reaches the slot count.
    legend = wait_js(page, """
        const li = document.querySelector('#legend li[data-worker="w1"]');
        return li && Number(li.dataset.peak) >= arguments[0] && li.dataset.slots !== '' &&
               {peak: Number(li.dataset.peak), slots: Number(li.dataset.slots), text: li.textContent};""", SLOTS)
    assert legend["peak"] == SLOTS and legend["slots"] == SLOTS
    assert "estimate" in legend["text"]
    chart = page.execute_script("const c = document.getElementById('chart');"
                                "return {peak: Number(c.dataset.peak), slots: Number(c.dataset.slots),"
                                " takes: Number(c.dataset.takes)}")
    assert chart["peak"] == SLOTS and chart["slots"] == SLOTS and chart["takes"] >= 1
    worker = wait_js(page, "const r = document.querySelector('#workers tr[data-worker=w1]');"
                           "return r && r.dataset.slots !== '' && r.dataset.slots")
    assert worker == str(SLOTS)
    # Pointing at a take on the chart describes it (swept right to left with
    # synthetic pointer moves, in the page).
    described = page.execute_script("""
        const canvas = document.getElementById('chart');
        const rect = canvas.getBoundingClientRect();
        for (let px = rect.width - 1; px >= 0; px -= 1) {
          canvas.dispatchEvent(new MouseEvent('mousemove', {clientX: rect.left + px, clientY: rect.bottom - 25}));
          const text = document.getElementById('takes-summary').textContent;
          if (text.startsWith('Take by')) return text;
        }
        return null;""")
    assert re.match(r"Take by w1 at -\d+\.\d s: asked \d+, given \d+, \d+ held when asked \(slots ≈ \d+\)",
                    described or ""), described
    page.execute_script("document.getElementById('chart').dispatchEvent(new MouseEvent('mouseleave'))")
    assert page.execute_script("return document.getElementById('takes-summary').textContent")\
        .startswith("Takes in the window")
    for job_id in ids[-3:]:
        row_status(page, job_id, "COMPLETED")
    path = shot(page, tmp_path, "burst")
    if os.environ.get("SLOTWORKER_UPDATE_SCREENSHOT") == "1":
        os.makedirs(os.path.dirname(README_SCREENSHOT), exist_ok=True)
        shutil.copyfile(path, README_SCREENSHOT)
    no_console_errors(page)


def test_cancel_from_the_page(page: Any, served: Platform, tmp_path: Path) -> None:
    from selenium.webdriver.common.by import By

    RELEASE.clear()
    try:
        # Every slot busy, so the next job stays queued until cancelled.
        blockers = [served.submit({"hold": i}) for i in range(SLOTS)]
        assert served.wait_until(lambda p: all(p.job(i).status == "IN_PROGRESS" for i in blockers), WAIT)
        queued = served.submit({"never": "runs"})
        row_status(page, queued, "IN_QUEUE")
        page.find_element(By.CSS_SELECTOR, f'#jobs tr[data-id="{queued}"] td.act button').click()
        cells = row_status(page, queued, "CANCELLED")
        assert cells["worker"] == "" and served.status(queued)["status"] == "CANCELLED"
        # A running job is cancelled too (its worker is told to stop it).
        page.find_element(By.CSS_SELECTOR, f'#jobs tr[data-id="{blockers[0]}"] td.act button').click()
        row_status(page, blockers[0], "CANCELLED")
        shot(page, tmp_path, "cancelled")
    finally:
        RELEASE.set()
    assert served.wait_final(blockers, timeout=WAIT)
    no_console_errors(page)


def test_docs_renders_the_operations_and_tries_one(driver: Any, served: Platform, tmp_path: Path) -> None:
    driver.get(served.url + "/docs")
    driver.get_log("browser")
    paths: List[str] = wait_js(driver, "const ops = document.querySelectorAll('details.op[data-path]');"
                                       "return ops.length >= 10 && Array.from(ops).map(o => o.dataset.method + ' ' +"
                                       " o.dataset.path)")
    for op in ("post /run", "post /runsync", "get /status/{job_id}", "get /health", "get /console/jobs",
               "get /console/timeline"):
        assert op in paths
    driver.execute_script("const op = document.querySelector('details.op[data-path=\"/health\"]');"
                          "op.open = true; op.querySelector('form.try button').click()")
    text = wait_js(driver, "const op = document.querySelector('details.op[data-path=\"/health\"]');"
                           "return op.querySelector('.answer-text').textContent")
    assert "inQueue" in text and json.loads(text)["workers"]["running"] >= 0
    # A body-carrying operation: /runsync with an input, answered as text.
    driver.execute_script("""
        const op = document.querySelector('details.op[data-path="/runsync"]');
        op.open = true;
        op.querySelector('textarea').value = JSON.stringify({input: '<b>docs</b>'});
        op.querySelector('form.try button').click();""")
    text = wait_js(driver, "const t = document.querySelector('details.op[data-path=\"/runsync\"] .answer-text')"
                           ".textContent; return t.includes('COMPLETED') && t")
    assert json.loads(text)["output"] == "<b>docs</b>"
    shot(driver, tmp_path, "docs")
    no_console_errors(driver)
    driver.get("about:blank")


# ---------------------------------------------------------------- narrow windows
#: Texts that must each stay on one line, whatever the width from 720 px up.
ONE_LINE = ("#counters .counter", ".card-head h2", ".bar h1", ".bar nav a", "#workers thead th", "#jobs thead th")

#: Run in the page: every way the layout breaks, as text (an empty list: none).
LAYOUT_PROBLEMS = """
    const lineHeight = (node) => {
      const style = getComputedStyle(node);
      const value = parseFloat(style.lineHeight);
      return Number.isNaN(value) ? 1.2 * parseFloat(style.fontSize) : value;
    };
    // The box of the text itself, which spills out of a box too narrow for it.
    const textBox = (node) => { const r = document.createRange(); r.selectNodeContents(node);
                                return r.getBoundingClientRect(); };
    const name = (node) => `${node.tagName.toLowerCase()} "${node.textContent.trim()}"`;
    const problems = [];
    for (const selector of arguments[0]) {
      for (const node of document.querySelectorAll(selector)) {
        if (!node.textContent.trim()) continue;
        const text = textBox(node);
        if (text.height > 1.5 * lineHeight(node)) problems.push(`${name(node)} wraps (${text.height} px high)`);
      }
    }
    for (const table of ["workers", "jobs"]) {
      const heads = Array.from(document.querySelectorAll(`#${table} thead th`)).filter((th) => th.textContent.trim());
      heads.forEach((th, i) => {
        const box = th.getBoundingClientRect();
        const text = textBox(th);
        if (text.left < box.left - 0.5 || text.right > box.right + 0.5) problems.push(`${name(th)} spills out of its cell`);
        if (i && text.left < textBox(heads[i - 1]).right) problems.push(`${name(th)} overlaps ${name(heads[i - 1])}`);
      });
    }
    if (document.documentElement.scrollWidth > window.innerWidth) {
      problems.push(`the page is ${document.documentElement.scrollWidth} px wide in a ${window.innerWidth} px window`);
    }
    return problems;"""


def set_width(driver: Any, width: int) -> None:
    """Make the page `width` px wide (the module's driver is WIDTH wide otherwise)."""
    driver.execute_cdp_cmd("Emulation.setDeviceMetricsOverride",
                           {"width": width, "height": HEIGHT, "deviceScaleFactor": 1, "mobile": False})


@pytest.mark.parametrize("width", [720, 1024, 1440])
def test_the_page_reads_well_from_720_px_wide(page: Any, served: Platform, tmp_path: Path, width: int) -> None:
    # A finished job with a long output and one worker: every column and counter has text.
    job_id = served.submit({"prompt": "a long enough input " * 8})
    assert served.wait_final([job_id], timeout=WAIT)
    try:
        set_width(page, width)
        page.refresh()
        row_status(page, job_id, "COMPLETED")
        wait_js(page, "return document.querySelector('#workers tr[data-worker=w1]')")
        counters = page.execute_script("return Array.from(document.querySelectorAll('#counters .counter'))"
                                       ".map(n => n.textContent)")
        assert [c.split()[0] for c in counters] == ["queue", "in", "completed", "failed", "cancelled",
                                                    "requeued", "takes"], counters
        shot(page, tmp_path, f"width-{width}")
        assert page.execute_script(LAYOUT_PROBLEMS, list(ONE_LINE)) == []
        no_console_errors(page)
    finally:
        set_width(page, WIDTH)


def test_a_failed_submission_clears_the_previous_answer(page: Any, served: Platform, tmp_path: Path) -> None:
    from selenium.webdriver.common.by import By

    answer = submit(page, '{"first": 1}', route="runsync")
    assert answer["status"] == "COMPLETED"
    box = page.find_element(By.ID, "input")
    box.clear()
    box.send_keys('{"not json": ')
    page.find_element(By.ID, "submit").click()
    shown = wait_js(page, """
        const m = document.getElementById('form-message');
        const a = document.getElementById('answer');
        return m.dataset.kind === 'error' && {message: m.textContent, hidden: a.hidden, answer: a.textContent};""")
    assert shown["message"].startswith("The input is not JSON"), shown
    # The first job's answer is gone: what is on screen is the error alone.
    assert shown["hidden"] and shown["answer"] == "", shown
    assert page.execute_script("return document.getElementById('input').getAttribute('aria-invalid')") == "true"
    shot(page, tmp_path, "bad-input")
    # A good input afterwards shows its answer again, and the mark goes.
    assert submit(page, '{"second": 2}', route="runsync")["output"] == {"echo": {"second": 2}}
    assert page.execute_script("return document.getElementById('input').getAttribute('aria-invalid')") is None
    no_console_errors(page)
