"""The OpenAPI 3 document of the local platform's client API (hand-written)."""

from __future__ import annotations

from typing import Any, Dict

from .._version import __version__
from .console.jobs import PAGE_DEFAULT, PAGE_MAX
from .console.timeline import WINDOW_DEFAULT, WINDOW_MAX

_JOB_ID = {"name": "job_id", "in": "path", "required": True, "schema": {"type": "string"}}
_ERROR = {
    "description": "bad request",
    "content": {"application/json": {"schema": {"$ref": "#/components/schemas/Error"}}},
}


def _ref(name: str) -> Dict[str, Any]:
    return {"application/json": {"schema": {"$ref": f"#/components/schemas/{name}"}}}


def openapi_document(server_url: str = "") -> Dict[str, Any]:
    """The OpenAPI 3.0 document; every path is also served under /v2/{endpoint}/."""
    status_ops = {
        "tags": ["jobs"],
        "summary": "Status of a job (output once final).",
        "parameters": [_JOB_ID],
        "responses": {"200": {"description": "the job", "content": _ref("JobStatus")},
                      "404": {"description": "unknown job id", "content": _ref("Error")}},
    }
    stream_ops = {
        "tags": ["jobs"],
        "summary": "Stream chunks of a job not yet returned by an earlier /stream call "
                   "(?all=1: every chunk so far). Waits up to ?wait=ms for a new chunk.",
        "parameters": [
            _JOB_ID,
            {"name": "all", "in": "query", "required": False, "schema": {"type": "string", "enum": ["0", "1"]}},
            {"name": "wait", "in": "query", "required": False, "schema": {"type": "number"}},
        ],
        "responses": {"200": {"description": "new chunks", "content": _ref("StreamStatus")},
                      "404": {"description": "unknown job id", "content": _ref("Error")}},
    }
    doc: Dict[str, Any] = {
        "openapi": "3.0.3",
        "info": {
            "title": "slotworker local platform",
            "version": __version__,
            "description": "Client API of the local RunPod-style platform, and the JSON routes "
                           "of its console. Paths are served both bare and under /v2/{endpoint}/.",
        },
        "tags": [
            {"name": "jobs", "description": "Submit, follow and cancel jobs (the RunPod client API)."},
            {"name": "platform", "description": "The platform's state and this document."},
            {"name": "console", "description": "The local console's pages and the JSON routes its "
                                               "page polls. Values a handler produced are JSON text, cut "
                                               "to a bounded length; times are seconds relative to now."},
        ],
        "paths": {
            "/run": {"post": {
                "tags": ["jobs"],
                "summary": "Queue a job.",
                "requestBody": {"required": True, "content": _ref("RunRequest")},
                "responses": {"200": {"description": "queued", "content": _ref("RunResponse")},
                              "400": _ERROR, "413": _ERROR},
            }},
            "/runsync": {"post": {
                "tags": ["jobs"],
                "summary": "Queue a job and wait for its final state (up to ?wait=ms, default 90 s).",
                "parameters": [{"name": "wait", "in": "query", "required": False, "schema": {"type": "number"}}],
                "requestBody": {"required": True, "content": _ref("RunRequest")},
                "responses": {"200": {"description": "the job, final unless the wait ran out",
                                      "content": _ref("JobStatus")},
                              "400": _ERROR, "413": _ERROR},
            }},
            "/status/{job_id}": {"get": status_ops, "post": status_ops},
            "/stream/{job_id}": {"get": stream_ops, "post": stream_ops},
            "/cancel/{job_id}": {"post": {
                "tags": ["jobs"],
                "summary": "Cancel a job (queued: at once; running: its worker is told to stop).",
                "parameters": [_JOB_ID],
                "responses": {"200": {"description": "the job", "content": _ref("JobStatus")},
                              "404": {"description": "unknown job id", "content": _ref("Error")}},
            }},
            "/purge-queue": {"post": {
                "tags": ["jobs"],
                "summary": "Cancel every queued job.",
                "responses": {"200": {"description": "how many were removed"}},
            }},
            "/health": {"get": {
                "tags": ["platform"],
                "summary": "Job and worker counts.",
                "responses": {"200": {"description": "counts", "content": _ref("Health")}},
            }},
            "/openapi.json": {"get": {
                "tags": ["platform"],
                "summary": "This document.",
                "responses": {"200": {"description": "OpenAPI 3 document"}},
            }},
            **console_paths(),
        },
        "components": {"schemas": {
            "RunRequest": {
                "type": "object",
                "required": ["input"],
                "properties": {
                    "input": {"description": "handed to the handler as job['input']"},
                    "webhook": {"type": "string", "description": "POSTed the final status object"},
                    "id": {"type": "string", "description": "job id (default: a uuid4)"},
                },
            },
            "RunResponse": {
                "type": "object",
                "properties": {"id": {"type": "string"}, "status": {"$ref": "#/components/schemas/State"}},
            },
            "State": {"type": "string", "enum": [
                "IN_QUEUE", "IN_PROGRESS", "COMPLETED", "FAILED", "CANCELLED", "TIMED_OUT"]},
            "JobStatus": {
                "type": "object",
                "required": ["id", "status"],
                "properties": {
                    "id": {"type": "string"},
                    "status": {"$ref": "#/components/schemas/State"},
                    "output": {"description": "result; while IN_PROGRESS, the latest progress update"},
                    "error": {"description": "present when the job FAILED"},
                    "delayTime": {"type": "integer", "description": "ms from submit to take"},
                    "executionTime": {"type": "integer", "description": "ms from take to result"},
                    "workerId": {"type": "string"},
                    "stopPod": {"type": "boolean"},
                },
            },
            "StreamStatus": {
                "type": "object",
                "properties": {
                    "id": {"type": "string"},
                    "status": {"$ref": "#/components/schemas/State"},
                    "stream": {"type": "array", "items": {"type": "object", "properties": {"output": {}}}},
                    "error": {},
                },
            },
            "Health": {
                "type": "object",
                "properties": {
                    "jobs": {"type": "object", "properties": {
                        k: {"type": "integer"} for k in
                        ("completed", "failed", "inProgress", "inQueue", "retried")}},
                    "workers": {"type": "object", "properties": {
                        "idle": {"type": "integer"}, "running": {"type": "integer"}}},
                },
            },
            **console_schemas(),
            "Error": {
                "type": "object",
                "properties": {"error": {"type": "string"}, "status": {"type": "integer"}},
            },
        }},
    }
    if server_url:
        doc["servers"] = [{"url": server_url}]
    return doc


def _html(summary: str) -> Dict[str, Any]:
    return {"get": {
        "tags": ["console"],
        "summary": summary,
        "responses": {"200": {"description": "an HTML page (its script and style come from /console/static/)",
                              "content": {"text/html": {}}}},
    }}


def _no_params_400() -> Dict[str, Any]:
    return {"description": "an unknown or out-of-range query parameter", "content": _ref("Error")}


def console_paths() -> Dict[str, Any]:
    """The console's pages and JSON routes."""
    return {
        "/": _html("The local console: submit jobs, watch them run, see the worker side."),
        "/docs": _html("This reference, rendered by the page from /openapi.json."),
        "/console/jobs": {"get": {
            "tags": ["console"],
            "summary": f"A page of jobs, newest first ({PAGE_DEFAULT} by default, at most {PAGE_MAX}).",
            "parameters": [
                {"name": "limit", "in": "query", "required": False,
                 "schema": {"type": "integer", "minimum": 1, "maximum": PAGE_MAX}},
                {"name": "before", "in": "query", "required": False,
                 "description": "only jobs submitted before this index (the `older` of a page)",
                 "schema": {"type": "integer", "minimum": 0}},
            ],
            "responses": {"200": {"description": "the page", "content": _ref("ConsoleJobs")},
                          "400": _no_params_400()},
        }},
        "/console/jobs/{job_id}": {"get": {
            "tags": ["console"],
            "summary": "One job with longer excerpts of its input, output, error and stream.",
            "parameters": [_JOB_ID],
            "responses": {"200": {"description": "the job", "content": _ref("ConsoleJob")},
                          "400": _no_params_400(),
                          "404": {"description": "unknown job id", "content": _ref("Error")}},
        }},
        "/console/workers": {"get": {
            "tags": ["console"],
            "summary": "Queue depth, job counters, and each worker: jobs in progress and its slot estimate.",
            "responses": {"200": {"description": "the worker side now", "content": _ref("ConsoleWorkers")},
                          "400": _no_params_400()},
        }},
        "/console/timeline": {"get": {
            "tags": ["console"],
            "summary": "Jobs in progress per worker over the last `window` seconds, and the takes in it.",
            "parameters": [
                {"name": "window", "in": "query", "required": False,
                 "description": f"seconds (default {WINDOW_DEFAULT:g})",
                 "schema": {"type": "number", "minimum": 1, "maximum": WINDOW_MAX}},
            ],
            "responses": {"200": {"description": "the timeline", "content": _ref("ConsoleTimeline")},
                          "400": _no_params_400()},
        }},
    }


def console_schemas() -> Dict[str, Any]:
    """Schemas of the console's JSON routes."""
    text = {"type": "string", "nullable": True,
            "description": "a string as it is, any other value as JSON text; cut to a bounded length"}
    ms = {"type": "integer", "nullable": True}
    job = {
        "type": "object",
        "properties": {
            "index": {"type": "integer", "nullable": True, "description": "submission order, from 0"},
            "id": {"type": "string"},
            "status": {"$ref": "#/components/schemas/State"},
            "workerId": {"type": "string", "nullable": True},
            "retried": {"type": "integer", "description": "times requeued after a job timeout"},
            "ageS": {"type": "number", "description": "seconds since submitted"},
            "delayMs": dict(ms, description="submit to take; while queued, so far"),
            "executionMs": dict(ms, description="take to result; while running, so far"),
            "output": dict(text, description="the output as text (running: the last progress update)"),
            "outputTruncated": {"type": "boolean"},
            "error": text,
            "errorTruncated": {"type": "boolean"},
            "errorSummary": {"type": "string", "nullable": True,
                             "description": "'Type: message' when the error is a worker's error report"},
            "streamCount": {"type": "integer"},
            "streamTail": {"type": "array", "items": {"type": "string"},
                           "description": "the last stream chunks, as text"},
            "input": dict(text, description="detail view only"),
            "inputTruncated": {"type": "boolean"},
        },
    }
    return {
        "ConsoleJob": job,
        "ConsoleJobs": {
            "type": "object",
            "properties": {
                "total": {"type": "integer"},
                "limit": {"type": "integer"},
                "jobs": {"type": "array", "items": {"$ref": "#/components/schemas/ConsoleJob"}},
                "older": {"type": "integer", "nullable": True,
                          "description": "`before` for the next older page; null on the oldest"},
            },
        },
        "ConsoleWorkers": {
            "type": "object",
            "properties": {
                "queue": {"type": "object", "properties": {
                    "jobs": {"type": "integer"}, "raw": {"type": "integer"}, "waitingTakes": {"type": "integer"}}},
                "counts": {"type": "object", "additionalProperties": {"type": "integer"}},
                "workers": {"type": "array", "items": {"type": "object", "properties": {
                    "id": {"type": "string"},
                    "inProgress": {"type": "integer"},
                    "slotsEstimate": {"type": "integer", "nullable": True,
                                      "description": "the highest (jobs held + jobs asked for) over its "
                                                     "takes of the last minute"},
                    "lastSeenS": {"type": "number", "nullable": True},
                    "lastTakeS": {"type": "number", "nullable": True},
                }}},
                "workersTotal": {"type": "integer"},
                "platform": {"type": "object"},
            },
        },
        "ConsoleTimeline": {
            "type": "object",
            "properties": {
                "window": {"type": "number"},
                "knownFrom": {"type": "number", "nullable": True,
                              "description": "set when older changes were not kept"},
                "workers": {"type": "array", "items": {"type": "object", "properties": {
                    "id": {"type": "string"},
                    "points": {"type": "array", "description": "[t, jobs in progress from t on] steps",
                               "items": {"type": "array", "items": {"type": "number"}}},
                    "inProgress": {"type": "integer"},
                    "slotsEstimate": {"type": "integer", "nullable": True,
                                      "description": "the highest (held + asked) over its takes in the window"},
                }}},
                "takes": {"type": "array", "items": {"type": "object", "properties": {
                    "t": {"type": "number", "description": "answered"},
                    "startT": {"type": "number", "description": "asked"},
                    "worker": {"type": "string"},
                    "asked": {"type": "integer"},
                    "given": {"type": "integer"},
                    "held": {"type": "integer", "nullable": True,
                             "description": "jobs the worker held in progress when it asked"},
                }}},
                "takesTruncated": {"type": "boolean"},
            },
        },
    }
