import os, time
import slotworker as runpod

def handler(job):
    kind = job["input"]["kind"]
    if kind == "dict":
        return {"answer": 42}
    if kind == "scalar":
        return "forty-two"
    if kind == "bool":
        return True
    if kind == "none":
        return None
    if kind == "empty":
        return {}
    if kind == "error_key":
        return {"error": "bad thing", "partial": 1}
    if kind == "raise":
        raise ValueError("boom")
    if kind == "refresh":
        return {"answer": 1, "refresh_worker": True}
    if kind == "progress":
        runpod.serverless.progress_update(job, "half way")
        time.sleep(0.5)
        return {"answer": 2}
    if kind == "unicode":
        return {"text": "naïve 日本"}
    return {"kind": kind}

runpod.serverless.start({"handler": handler})
