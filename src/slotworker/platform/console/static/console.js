// The local console: submit jobs, list them, and draw the worker side.
// Data comes from the platform's JSON routes (/console/jobs, /console/workers,
// /console/timeline), polled about once a second while the tab is visible.
"use strict";

(() => {
  const {el, setText, getJSON, duration, ago} = SW;
  const $ = (id) => document.getElementById(id);

  const POLL_MS = 1000;
  const MIN_GAP_MS = 200;
  const PAGE = 50;
  const KEPT_INPUTS = 10;
  const KEPT_INPUT_CHARS = 64 * 1024;
  const SUBMIT_PARALLEL = 3; // leaves the browser's other connections to the polls
  const COLORS = ["#2563eb", "#d97706", "#059669", "#db2777", "#7c3aed", "#0891b2", "#65a30d", "#dc2626"];
  const STORE_KEY = "slotworker.console";

  const state = {
    before: null,       // null: the newest page; else the job index the page ends before
    olderCursor: null,
    windowS: 60,
    colors: new Map(),  // worker id -> color, stable while the page is open
    rows: new Map(),    // job id -> <tr>
    pollTimer: null,
    polling: false,
    again: false,
    lastPoll: -Infinity,
    chart: null,        // the last chart's time-to-x mapping and takes, for pointing at a take
    hover: null,        // the description of the take pointed at, if any
    takesSummary: "",
    countersKey: "",    // the counters last drawn
  };

  // ---------------------------------------------------------------- storage
  function loadSaved() {
    try {
      const saved = JSON.parse(localStorage.getItem(STORE_KEY) || "{}");
      return saved && typeof saved === "object" ? saved : {};
    } catch (e) {
      return {};
    }
  }

  function save(patch) {
    try {
      localStorage.setItem(STORE_KEY, JSON.stringify(Object.assign(loadSaved(), patch)));
    } catch (e) {
      // Storage full or disabled: the page works without remembering.
    }
  }

  function savedInputs() {
    const inputs = loadSaved().inputs;
    return Array.isArray(inputs) ? inputs.filter((t) => typeof t === "string") : [];
  }

  function rememberInput(text) {
    if (text.length > KEPT_INPUT_CHARS) return; // a huge input would crowd out the others
    const inputs = savedInputs().filter((t) => t !== text);
    inputs.unshift(text);
    save({inputs: inputs.slice(0, KEPT_INPUTS)});
    fillRecent();
  }

  function fillRecent() {
    const select = $("recent");
    const inputs = savedInputs();
    select.replaceChildren(el("option", {value: ""}, inputs.length ? "— pick one —" : "— none yet —"));
    inputs.forEach((text, i) => {
      const oneLine = text.replace(/\s+/g, " ");
      select.append(el("option", {value: String(i)}, oneLine.length > 60 ? oneLine.slice(0, 59) + "…" : oneLine));
    });
  }

  // ---------------------------------------------------------------- submit
  function chosenRoute() {
    return document.querySelector("input[name=route]:checked").value;
  }

  function message(text, kind) {
    const node = $("form-message");
    setText(node, text);
    node.dataset.kind = kind || "";
  }

  async function post(url, body) {
    const response = await fetch(url, {
      method: "POST",
      headers: {"Content-Type": "application/json"},
      body: body === undefined ? undefined : JSON.stringify(body),
    });
    const text = await response.text();
    return {ok: response.ok, status: response.status, text};
  }

  /** Take the last answer off the screen: what shows is about this submission only. */
  function clearAnswer() {
    const answer = $("answer");
    answer.hidden = true;
    setText(answer, "");
  }

  async function onSubmit(event) {
    event.preventDefault();
    const box = $("input");
    const text = box.value;
    let input;
    try {
      input = JSON.parse(text);
    } catch (e) {
      clearAnswer(); // the previous job's answer would read as this input's
      box.setAttribute("aria-invalid", "true");
      message("The input is not JSON: " + e.message, "error");
      return;
    }
    box.removeAttribute("aria-invalid");
    const route = chosenRoute();
    const copies = Math.max(1, Math.min(500, parseInt($("copies").value, 10) || 1));
    rememberInput(text);
    save({route, copies});
    $("submit").disabled = true;
    const answer = $("answer");
    clearAnswer();
    message(route === "runsync" ? "Waiting for the result…" : "Submitting…", "busy");
    let started = 0;
    let finished = 0;
    let failed = 0;
    let last = null;
    // A few requests in flight at a time, each taking the next copy.
    const worker = async () => {
      while (started < copies) {
        started += 1;
        let result;
        try {
          result = await post("/" + route, {input});
        } catch (e) {
          result = {ok: false, status: 0, text: String(e)};
        }
        finished += 1;
        if (!result.ok) failed += 1;
        if (!result.ok || !last || last.ok) last = result; // a refusal is the answer worth showing
        if (copies > 1) message(`Submitting… ${finished} of ${copies}`, "busy");
        schedulePoll(0);
      }
    };
    await Promise.all(Array.from({length: Math.min(SUBMIT_PARALLEL, copies)}, worker));
    $("submit").disabled = false;
    if (failed) {
      message(`${failed} of ${copies} refused (HTTP ${last.status})`, "error");
    } else {
      message(copies > 1 ? `${copies} jobs submitted to /${route}` : `Submitted to /${route}`, "ok");
    }
    if (last) {
      setText(answer, SW.prettyText(last.text));
      answer.hidden = false;
    }
    schedulePoll(0);
  }

  // ---------------------------------------------------------------- jobs
  const FINAL = new Set(["COMPLETED", "FAILED", "CANCELLED", "TIMED_OUT"]);

  function makeRow(id) {
    const cells = {
      id: el("td", {className: "id"}, el("code", {title: id}, id.length > 13 ? id.slice(0, 8) + "…" : id)),
      status: el("td", {className: "status"}, el("span", {className: "badge"})),
      age: el("td", {className: "num age"}),
      delay: el("td", {className: "num delay"}),
      exec: el("td", {className: "num exec"}),
      worker: el("td", {className: "worker"}),
      out: el("td", {className: "out"}),
      act: el("td", {className: "act"}),
    };
    const cancel = el("button", {type: "button", className: "small danger", title: "POST /cancel/" + id,
                                 onclick: (e) => { e.stopPropagation(); cancelJob(id); }}, "Cancel");
    cells.act.append(cancel);
    const row = el("tr", {dataset: {id}, tabindex: "0", title: "details",
                          onclick: () => openDetail(id),
                          onkeydown: (e) => { if (e.key === "Enter") openDetail(id); }},
                   ...Object.values(cells));
    row.cells_ = cells;
    row.cancel_ = cancel;
    return row;
  }

  function outputNodes(job) {
    // Each part is its own text node: data never becomes markup.
    const parts = [];
    if (job.error !== null) {
      const text = job.errorSummary !== null ? job.errorSummary : job.error + (job.errorTruncated ? " …" : "");
      parts.push(el("span", {className: "err"}, "error: " + text));
    }
    if (job.output !== null) {
      parts.push(el("span", {className: "output"}, job.output + (job.outputTruncated ? " …" : "")));
    }
    if (job.streamCount > 0) {
      parts.push(el("span", {className: "chunks"},
                    `stream ${job.streamCount}: ` + (job.streamCount > job.streamTail.length ? "… " : "") +
                    job.streamTail.join(" · ")));
    }
    return parts;
  }

  function updateRow(row, job) {
    const c = row.cells_;
    row.dataset.status = job.status;
    const badge = c.status.firstChild;
    setText(badge, job.status.replace("_", " ").toLowerCase());
    badge.className = "badge s-" + job.status;
    setText(c.age, ago(job.ageS));
    const live = !FINAL.has(job.status);
    setText(c.delay, duration(job.delayMs) + (live && job.status === "IN_QUEUE" && job.delayMs !== null ? "…" : ""));
    setText(c.exec, duration(job.executionMs) + (live && job.status === "IN_PROGRESS" ? "…" : ""));
    setText(c.worker, job.workerId || "");
    if (job.retried) c.worker.title = `requeued ${job.retried}×`;
    // The output cell is rebuilt only when its text changes.
    const key = JSON.stringify([job.output, job.error, job.errorSummary, job.streamCount, job.streamTail]);
    if (row.outKey_ !== key) {
      row.outKey_ = key;
      c.out.replaceChildren(...outputNodes(job));
      c.out.title = c.out.textContent.slice(0, 2000);
    }
    row.cancel_.hidden = !live;
  }

  function renderJobs(page) {
    const body = $("jobs").tBodies[0];
    const seen = new Set();
    const rows = page.jobs.map((job) => {
      seen.add(job.id);
      let row = state.rows.get(job.id);
      if (!row) {
        row = makeRow(job.id);
        state.rows.set(job.id, row);
      }
      updateRow(row, job);
      return row;
    });
    for (const id of Array.from(state.rows.keys())) if (!seen.has(id)) state.rows.delete(id);
    body.replaceChildren(...rows);
    $("jobs-empty").hidden = page.total > 0;
    state.olderCursor = page.older;
    $("older").disabled = page.older === null;
    $("newest").disabled = state.before === null;
    if (page.jobs.length) {
      const first = page.total - page.jobs[0].index;
      const last = page.total - page.jobs[page.jobs.length - 1].index;
      setText($("jobs-range"), `${first}–${last} of ${page.total}, newest first`);
    } else {
      setText($("jobs-range"), page.total ? `none here (${page.total} in all)` : "");
    }
  }

  async function cancelJob(id) {
    try {
      await post("/cancel/" + encodeURIComponent(id));
    } finally {
      schedulePoll(0);
    }
  }

  async function purgeQueue() {
    if (!window.confirm("Cancel every queued job?")) return;
    const result = await post("/purge-queue");
    message(result.ok ? "Queue purged: " + JSON.parse(result.text).removed + " cancelled" : "Purge refused", result.ok ? "ok" : "error");
    schedulePoll(0);
  }

  // ---------------------------------------------------------------- detail
  function section(title, text, cut, note) {
    if (text === null || text === undefined) return null;
    return el("section", {className: "detail-part"},
              el("h3", {}, title, cut ? el("span", {className: "muted"}, " (cut; " + note + ")") : null),
              el("pre", {}, text));
  }

  function errorSection(text, cut, note) {
    // A worker reports an error as JSON text of {error_type, error_message,
    // error_traceback}: each field gets its own block, the traceback with
    // its line breaks.
    let fields = null;
    try {
      const value = JSON.parse(text);
      if (value && typeof value === "object" && !Array.isArray(value)) fields = value;
    } catch (e) {
      fields = null;
    }
    if (!fields || cut) return section("Error", text, cut, note);
    return el("section", {className: "detail-part"}, el("h3", {}, "Error"),
              ...Object.entries(fields).map(([key, value]) => el("div", {className: "field"},
                el("div", {className: "muted small"}, key),
                el("pre", {}, typeof value === "string" ? value : JSON.stringify(value, null, 2)))));
  }

  async function openDetail(id) {
    const dialog = $("detail");
    let job;
    try {
      job = await getJSON("/console/jobs/" + encodeURIComponent(id));
    } catch (e) {
      message("Could not load the job: " + e.message, "error");
      return;
    }
    setText($("detail-title"), "Job " + job.id);
    const meta = $("detail-meta");
    meta.replaceChildren();
    const add = (k, v) => { if (v !== null && v !== undefined && v !== "") meta.append(el("dt", {}, k), el("dd", {}, v)); };
    add("status", job.status);
    add("worker", job.workerId);
    add("delay", duration(job.delayMs));
    add("execution", duration(job.executionMs));
    add("requeued", job.retried ? job.retried + "×" : "");
    const full = "the whole value is at /status/" + job.id;
    const chunks = job.streamCount
      ? el("section", {className: "detail-part"},
           el("h3", {}, `Stream chunks (${job.streamCount}` +
                        (job.streamCount > job.streamTail.length ? `, the last ${job.streamTail.length}` : "") + ")"),
           el("ol", {start: String(job.streamCount - job.streamTail.length + 1)},
              ...job.streamTail.map((c) => el("li", {}, el("pre", {}, c)))))
      : null;
    $("detail-body").replaceChildren(...[
      section("Input", job.input, job.inputTruncated, "as submitted"),
      section("Output", job.output, job.outputTruncated, full),
      errorSection(job.error, job.errorTruncated, full),
      chunks,
    ].filter(Boolean));
    if (!dialog.open) dialog.showModal();
  }

  // ---------------------------------------------------------------- workers
  function colorOf(worker) {
    if (!state.colors.has(worker)) state.colors.set(worker, COLORS[state.colors.size % COLORS.length]);
    return state.colors.get(worker);
  }

  /** One item per counter, so that a narrow window wraps between counters, never inside one. */
  function renderCounters(data) {
    const c = data.counts;
    const counters = [["queue", data.queue.jobs], ["in progress", c.in_progress], ["completed", c.completed],
                      ["failed", c.failed], ["cancelled", c.cancelled], ["requeued", c.requeued],
                      ["takes", c.takes]];
    const node = $("counters");
    const key = JSON.stringify(counters);
    if (state.countersKey !== key) { // rebuilt only when a number changed
      state.countersKey = key;
      node.replaceChildren(...counters.map(([label, value]) =>
        el("span", {className: "counter", dataset: {name: label}}, label + " ", el("strong", {}, String(value)))));
    }
    node.dataset.queue = data.queue.jobs;
  }

  function renderWorkers(data) {
    const info = data.platform;
    setText($("platform-info"),
            `endpoint ${info.endpoint} · take cost ${info.takeCost} s · long poll ${info.longPoll} s` +
            (info.jobTimeout ? ` · job timeout ${info.jobTimeout} s` : ""));
    renderCounters(data);
    const body = $("workers").tBodies[0];
    const rows = data.workers.map((w) => {
      const slots = w.slotsEstimate;
      const meter = el("meter", {min: "0", max: String(Math.max(1, slots || w.inProgress)), value: String(w.inProgress)});
      return el("tr", {dataset: {worker: w.id, inProgress: w.inProgress, slots: slots === null ? "" : slots}},
                el("td", {className: "worker"}, el("span", {className: "swatch s" + COLORS.indexOf(colorOf(w.id))}),
                   " ", w.id),
                el("td", {className: "num"}, String(w.inProgress)),
                el("td", {className: "num"}, slots === null ? "?" : "≈ " + slots),
                el("td", {}, meter),
                el("td", {className: "muted"}, ago(w.lastSeenS)));
    });
    if (data.workersTotal > data.workers.length) {
      rows.push(el("tr", {}, el("td", {colspan: "5", className: "muted"},
                                `and ${data.workersTotal - data.workers.length} more`)));
    }
    if (!rows.length) {
      rows.push(el("tr", {}, el("td", {colspan: "5", className: "muted"},
                                "No worker yet. Start one with the environment `slotworker platform` prints.")));
    }
    body.replaceChildren(...rows);
  }

  // ---------------------------------------------------------------- chart
  function niceStep(max, target) {
    const raw = max / target;
    const mag = Math.pow(10, Math.floor(Math.log10(raw)));
    for (const m of [1, 2, 5, 10]) if (raw <= m * mag) return m * mag;
    return 10 * mag;
  }

  function drawChart(data) {
    const canvas = $("chart");
    const ratio = window.devicePixelRatio || 1;
    const width = canvas.clientWidth;
    const height = canvas.clientHeight;
    if (canvas.width !== Math.round(width * ratio) || canvas.height !== Math.round(height * ratio)) {
      canvas.width = Math.round(width * ratio);
      canvas.height = Math.round(height * ratio);
    }
    const ctx = canvas.getContext("2d");
    ctx.setTransform(ratio, 0, 0, ratio, 0, 0);
    ctx.clearRect(0, 0, width, height);

    const win = data.window;
    const left = 34, right = 10, top = 8, bottom = 20, band = 46, gap = 10;
    const plotH = height - top - bottom - band - gap;
    const bandTop = top + plotH + gap;
    const x = (t) => left + (width - left - right) * (1 + t / win);

    const legend = [];
    let yMax = 1;
    let overallPeak = 0;
    let overallSlots = null;
    for (const w of data.workers) {
      const peak = Math.max(...w.points.map((p) => p[1]), w.inProgress);
      const slots = w.slotsEstimate;
      // The slot line starts at the worker's first take in the window.
      const firstTake = data.takes.find((t) => t.worker === w.id);
      legend.push({id: w.id, peak, slots, now: w.inProgress, points: w.points,
                   slotsFrom: firstTake ? firstTake.startT : -win});
      overallPeak = Math.max(overallPeak, peak);
      if (slots !== null) overallSlots = Math.max(overallSlots || 0, slots);
      yMax = Math.max(yMax, peak, slots || 0);
    }
    const step = niceStep(yMax, 4) < 1 ? 1 : niceStep(yMax, 4);
    yMax = Math.ceil((yMax + 0.001) / step) * step;
    const y = (n) => top + plotH * (1 - n / yMax);

    // Grid and axes.
    ctx.font = "11px system-ui, sans-serif";
    ctx.fillStyle = "#6b7280";
    ctx.strokeStyle = "#e5e7eb";
    ctx.lineWidth = 1;
    ctx.textAlign = "right";
    ctx.textBaseline = "middle";
    for (let n = 0; n <= yMax; n += step) {
      ctx.beginPath();
      ctx.moveTo(left, Math.round(y(n)) + 0.5);
      ctx.lineTo(width - right, Math.round(y(n)) + 0.5);
      ctx.stroke();
      ctx.fillText(String(n), left - 6, y(n));
    }
    ctx.textAlign = "center";
    ctx.textBaseline = "top";
    const tStep = niceStep(win, 6);
    for (let t = 0; t <= win + 1e-9; t += tStep) {
      ctx.fillText(t === 0 ? "now" : "−" + (win >= 120 && t % 60 === 0 ? t / 60 + " min" : t + " s"), x(-t), height - bottom + 5);
    }
    ctx.save();
    ctx.textAlign = "left";
    ctx.fillText("in progress", left + 4, top);
    ctx.fillText("takes", left + 4, bandTop);
    ctx.restore();
    ctx.strokeStyle = "#d1d5db";
    ctx.beginPath();
    ctx.moveTo(left, bandTop + band + 0.5);
    ctx.lineTo(width - right, bandTop + band + 0.5);
    ctx.stroke();

    // Slot estimates (dashed) and jobs in progress (solid), as steps.
    const stepLine = (points, endValue) => {
      ctx.beginPath();
      points.forEach(([t, n], i) => {
        if (i === 0) ctx.moveTo(x(Math.max(t, -win)), y(n));
        else {
          ctx.lineTo(x(t), y(points[i - 1][1]));
          ctx.lineTo(x(t), y(n));
        }
      });
      ctx.lineTo(x(0), y(endValue));
      ctx.stroke();
    };
    for (const item of legend) {
      const color = colorOf(item.id);
      ctx.strokeStyle = color;
      if (item.slots !== null) {
        ctx.setLineDash([5, 4]);
        ctx.lineWidth = 1.25;
        stepLine([[item.slotsFrom, item.slots]], item.slots);
        ctx.setLineDash([]);
      }
      ctx.lineWidth = 2;
      stepLine(item.points, item.now);
    }

    // Takes: outline up to what was asked, filled up to what was given.
    const maxAsked = Math.max(1, ...data.takes.map((t) => t.asked));
    for (const take of data.takes) {
      const color = colorOf(take.worker);
      const px = Math.round(x(take.t)) - 1;
      const hAsked = Math.max(2, (band - 4) * take.asked / maxAsked);
      const hGiven = (band - 4) * take.given / maxAsked;
      ctx.strokeStyle = color;
      ctx.globalAlpha = 0.55;
      ctx.lineWidth = 1;
      ctx.strokeRect(px + 0.5, bandTop + band - hAsked + 0.5, 2, hAsked - 1);
      ctx.globalAlpha = 1;
      ctx.fillStyle = color;
      if (hGiven > 0) ctx.fillRect(px, bandTop + band - hGiven, 3, hGiven);
    }

    // What the chart shows, as data the page (and its tests) can read.
    canvas.dataset.peak = String(overallPeak);
    canvas.dataset.slots = overallSlots === null ? "" : String(overallSlots);
    canvas.dataset.takes = String(data.takes.length);
    $("chart-empty").hidden = data.workers.length > 0 || data.takes.length > 0;

    $("legend").replaceChildren(...legend.map((item) =>
      el("li", {dataset: {worker: item.id, peak: item.peak, slots: item.slots === null ? "" : item.slots, now: item.now}},
         el("span", {className: "swatch s" + COLORS.indexOf(colorOf(item.id))}),
         ` ${item.id}: ${item.now} in progress now, peak ${item.peak}, slots ≈ ` +
         (item.slots === null ? "?" : item.slots) + " (estimate)")));
    const asked = data.takes.reduce((s, t) => s + t.asked, 0);
    const given = data.takes.reduce((s, t) => s + t.given, 0);
    const empty = data.takes.filter((t) => t.given === 0).length;
    state.takesSummary =
      `Takes in the window: ${data.takes.length}${data.takesTruncated ? " (the most recent)" : ""} · ` +
      `asked ${asked} · given ${given} · empty ${empty}` +
      (data.knownFrom !== null ? ` · older changes not kept (before ${Math.round(-data.knownFrom)} s ago)` : "") +
      (data.takes.length ? " · point at a take for its details" : "");
    state.chart = {x, takes: data.takes};
    setText($("takes-summary"), state.hover || state.takesSummary);
  }

  function describeTake(take) {
    return `Take by ${take.worker} at ${take.t.toFixed(1)} s: asked ${take.asked}, given ${take.given}` +
           (take.held === null ? "" : `, ${take.held} held when asked (slots ≈ ${take.held + take.asked})`) +
           `, answered after ${Math.round((take.t - take.startT) * 1000)} ms`;
  }

  function onChartPointer(event) {
    // The take drawn nearest the pointer, within a few pixels, is described
    // in place of the takes summary.
    const chart = state.chart;
    if (!chart) return;
    const px = event.clientX - $("chart").getBoundingClientRect().left;
    let nearest = null;
    let distance = 5;
    for (const take of chart.takes) {
      const d = Math.abs(chart.x(take.t) - px);
      if (d < distance) {
        nearest = take;
        distance = d;
      }
    }
    state.hover = nearest ? describeTake(nearest) : null;
    setText($("takes-summary"), state.hover || state.takesSummary);
  }

  // ---------------------------------------------------------------- polling
  function setConnection(ok, text) {
    const node = $("conn");
    node.dataset.state = ok ? "live" : "down";
    setText(node, text);
  }

  async function poll() {
    state.polling = true;
    state.lastPoll = performance.now();
    try {
      const jobsUrl = "/console/jobs?limit=" + PAGE + (state.before === null ? "" : "&before=" + state.before);
      const [workers, timeline, jobs] = await Promise.all([
        getJSON("/console/workers"),
        getJSON("/console/timeline?window=" + state.windowS),
        getJSON(jobsUrl),
      ]);
      renderWorkers(workers);
      drawChart(timeline);
      renderJobs(jobs);
      setConnection(true, "live");
    } catch (e) {
      setConnection(false, "no answer from the platform: " + e.message);
    } finally {
      state.polling = false;
      const soon = state.again;
      state.again = false;
      schedulePoll(soon ? 0 : POLL_MS);
    }
  }

  /** Poll in `ms` (0: as soon as allowed, but never more often than MIN_GAP_MS). */
  function schedulePoll(ms) {
    clearTimeout(state.pollTimer);
    if (document.hidden) return; // resumed by visibilitychange
    if (state.polling) {
      // The poll in flight may have missed what just changed: go again after it.
      if (ms === 0) state.again = true;
      return;
    }
    const wait = Math.max(ms, MIN_GAP_MS - (performance.now() - state.lastPoll));
    state.pollTimer = setTimeout(poll, wait);
  }

  // ---------------------------------------------------------------- start
  function start() {
    const saved = loadSaved();
    fillRecent();
    $("input").value = savedInputs()[0] || '{"prompt": "hello"}';
    if (saved.route === "runsync") document.querySelector("input[name=route][value=runsync]").checked = true;
    if (saved.copies) $("copies").value = saved.copies;
    if (saved.windowS) {
      $("window").value = String(saved.windowS);
      if (!$("window").value) $("window").value = "60"; // a window no longer offered
      state.windowS = Number($("window").value);
    }
    $("submit-form").addEventListener("submit", onSubmit);
    $("recent").addEventListener("change", (e) => {
      const text = savedInputs()[Number(e.target.value)];
      if (e.target.value !== "" && text !== undefined) $("input").value = text;
    });
    $("window").addEventListener("change", (e) => {
      state.windowS = Number(e.target.value) || 60;
      save({windowS: state.windowS});
      schedulePoll(0);
    });
    $("older").addEventListener("click", () => { state.before = state.olderCursor; schedulePoll(0); });
    $("newest").addEventListener("click", () => { state.before = null; schedulePoll(0); });
    $("purge").addEventListener("click", purgeQueue);
    $("chart").addEventListener("mousemove", onChartPointer);
    $("chart").addEventListener("mouseleave", () => {
      state.hover = null;
      setText($("takes-summary"), state.takesSummary);
    });
    $("detail-close").addEventListener("click", () => $("detail").close());
    document.addEventListener("visibilitychange", () => { if (!document.hidden) schedulePoll(0); });
    window.addEventListener("resize", () => schedulePoll(0));
    poll();
  }

  start();
})();
