"""``validate`` against runpod 1.12.0's on generated inputs and schemas.

Every outcome is compared exactly: the returned dict (values, int vs float,
key order, error texts and their order), the exception type and text when
one is raised, and what the call left in its arguments (text rules decoded
in place).
"""

from __future__ import annotations

import json
from typing import Any

from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from _codec import CONSTRAINTS, TYPES, decode, encode
from slotworker.serverless.utils.rp_validator import validate

MODULE = "runpod.serverless.utils.rp_validator"

KEYS = st.sampled_from(["a", "b", "c", "prompt", "steps"])
SCALARS = (st.none() | st.booleans() | st.integers(-1000, 1000) | st.floats()
           | st.text(max_size=4) | st.just(10 ** 400))
VALUES = st.recursive(SCALARS, lambda inner: st.lists(inner, max_size=3)
                      | st.dictionaries(st.text(max_size=3), inner, max_size=3), max_leaves=5)
TYPE_RULES = (st.sampled_from(list(TYPES.values())) | st.just((int, float))
              | st.sampled_from(["int", 5, None]))
REQUIRED_RULES = st.sampled_from([True, False, 0, 1, None, "", "yes"])
CONSTRAINT_RULES = st.sampled_from(list(CONSTRAINTS.values())) | st.just(5)

WELL_FORMED = st.fixed_dictionaries(
    {"type": st.sampled_from(list(TYPES.values())), "required": st.booleans()},
    optional={"default": VALUES, "constraints": st.sampled_from(list(CONSTRAINTS.values()))})
ANY_DICT_RULES = st.fixed_dictionaries(
    {}, optional={"type": TYPE_RULES, "required": REQUIRED_RULES, "default": VALUES,
                  "constraints": CONSTRAINT_RULES})
JSON_RULES = st.fixed_dictionaries(
    {}, optional={"type": st.sampled_from(["int", "str"]), "required": st.booleans(),
                  "default": VALUES}).map(json.dumps)
TEXT_RULES = st.sampled_from(["not json", "{", "5", "[1, 2]", '"required type"', "constraints",
                              "required", "type", "", "null"]) | st.text(max_size=6)
OTHER_RULES = st.sampled_from([5, None, [1], 1.5])
RULES = st.one_of(WELL_FORMED, WELL_FORMED, ANY_DICT_RULES, JSON_RULES, TEXT_RULES, OTHER_RULES)

SCHEMAS = st.dictionaries(KEYS, RULES, max_size=4)
INPUTS = st.one_of(st.dictionaries(KEYS | st.text(max_size=2), VALUES, max_size=4),
                   st.dictionaries(KEYS, VALUES, max_size=4),
                   st.lists(KEYS, max_size=3), st.none())


def ours(raw: Any, schema: Any) -> str:
    """Our outcome, encoded as the reference server encodes its own."""
    raw, schema = decode(encode(raw)), decode(encode(schema))  # fresh copies
    try:
        answer: dict = {"value": encode(validate(raw, schema))}
    except Exception as exc:
        answer = {"exc": [type(exc).__name__, str(exc)]}
    answer["args_after"] = [encode(raw), encode(schema)]
    return json.dumps(answer, sort_keys=True)


def theirs(runpod_ref: Any, raw: Any, schema: Any) -> str:
    return json.dumps(runpod_ref.call_raw(MODULE, "validate", raw, schema), sort_keys=True)


@settings(max_examples=1500, deadline=None, derandomize=True, database=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
@given(raw=INPUTS, schema=SCHEMAS)
@example(raw={}, schema={"a": {"required": False, "default": 1}})  # KeyError 'type'
@example(raw={"a": 1}, schema={"a": "required type"})
@example(raw={"a": 10 ** 400}, schema={"a": {"type": float, "required": True}})
@example(raw={"a": 1}, schema={"a": '{"type": "int", "required": false, "default": 3}'})
@example(raw={"a": True}, schema={"a": {"type": float, "required": True}})
@example(raw={"a": "x"}, schema={"a": {"type": int, "required": True, "default": "y",
                                       "constraints": CONSTRAINTS["never"]}})
def test_validate_matches_runpod(runpod_ref: Any, raw: Any, schema: Any) -> None:
    assert ours(raw, schema) == theirs(runpod_ref, raw, schema)


def test_the_generators_reach_every_outcome(runpod_ref: Any) -> None:
    # Guard against a differential test that only ever compares one branch:
    # the generated cases must include passes, each error, and exceptions.
    seen = set()

    @settings(max_examples=400, deadline=None, derandomize=True, database=None,
              suppress_health_check=[HealthCheck.function_scoped_fixture])
    @given(raw=INPUTS, schema=SCHEMAS)
    def collect(raw: Any, schema: Any) -> None:
        answer = json.loads(ours(raw, schema))
        if "exc" in answer:
            seen.add("exception")
            return
        result = decode(answer["value"])
        if "validated_input" in result:
            seen.add("validated")
        for message in result.get("errors", []):
            for marker in ("Unexpected input", "is a required input", "missing default",
                           "missing type", "should be", "constraints", "not a dictionary"):
                if marker in message:
                    seen.add(marker)

    collect()
    assert seen == {"exception", "validated", "Unexpected input", "is a required input",
                    "missing default", "missing type", "should be", "constraints",
                    "not a dictionary"}
