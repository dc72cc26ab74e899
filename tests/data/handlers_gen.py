import os
import slotworker as runpod

def handler(job):
    for i in range(3):
        yield {"chunk": i}

runpod.serverless.start({"handler": handler, "return_aggregate_stream": os.environ.get("AGG") == "1"})
