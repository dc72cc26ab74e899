"""The OpenAPI 3 document of the local platform's client API (hand-written)."""

from __future__ import annotations

from typing import Any, Dict

from .._version import __version__

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
        "summary": "Status of a job (output once final).",
        "parameters": [_JOB_ID],
        "responses": {"200": {"description": "the job", "content": _ref("JobStatus")},
                      "404": {"description": "unknown job id", "content": _ref("Error")}},
    }
    stream_ops = {
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
            "description": "Client API of the local RunPod-style platform. Paths are served "
                           "both bare and under /v2/{endpoint}/.",
        },
        "paths": {
            "/run": {"post": {
                "summary": "Queue a job.",
                "requestBody": {"required": True, "content": _ref("RunRequest")},
                "responses": {"200": {"description": "queued", "content": _ref("RunResponse")},
                              "400": _ERROR, "413": _ERROR},
            }},
            "/runsync": {"post": {
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
                "summary": "Cancel a job (queued: at once; running: its worker is told to stop).",
                "parameters": [_JOB_ID],
                "responses": {"200": {"description": "the job", "content": _ref("JobStatus")},
                              "404": {"description": "unknown job id", "content": _ref("Error")}},
            }},
            "/purge-queue": {"post": {
                "summary": "Cancel every queued job.",
                "responses": {"200": {"description": "how many were removed"}},
            }},
            "/health": {"get": {
                "summary": "Job and worker counts.",
                "responses": {"200": {"description": "counts", "content": _ref("Health")}},
            }},
            "/openapi.json": {"get": {
                "summary": "This document.",
                "responses": {"200": {"description": "OpenAPI 3 document"}},
            }},
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
            "Error": {
                "type": "object",
                "properties": {"error": {"type": "string"}, "status": {"type": "integer"}},
            },
        }},
    }
    if server_url:
        doc["servers"] = [{"url": server_url}]
    return doc
