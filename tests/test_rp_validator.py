"""``serverless.utils.rp_validator.validate``: results as runpod 1.12.0 gives them.

Each expected value here was produced by runpod 1.12.0's ``validate`` on the
same arguments; ``tests_differential/`` compares the two on generated cases.
"""

from __future__ import annotations

from typing import Any, Dict

import pytest

from slotworker.serverless.utils.rp_validator import validate

PROMPT_SCHEMA: Dict[str, Any] = {
    "prompt": {"type": str, "required": True},
    "steps": {"type": int, "required": False, "default": 10},
}


def test_valid_input_is_returned_with_its_values() -> None:
    assert validate({"prompt": "hi", "steps": 5}, PROMPT_SCHEMA) == {
        "validated_input": {"prompt": "hi", "steps": 5}}


def test_defaults_fill_absent_optional_keys() -> None:
    assert validate({"prompt": "hi"}, PROMPT_SCHEMA) == {"validated_input": {"prompt": "hi", "steps": 10}}


def test_the_input_dict_is_not_modified() -> None:
    raw = {"prompt": "hi"}
    validate(raw, PROMPT_SCHEMA)
    assert raw == {"prompt": "hi"}


def test_an_int_for_a_float_key_becomes_a_float() -> None:
    result = validate({"scale": 7}, {"scale": {"type": float, "required": True}})
    assert result == {"validated_input": {"scale": 7.0}}
    assert type(result["validated_input"]["scale"]) is float


@pytest.mark.parametrize("raw, schema, errors", [
    ({"scale": "7"}, {"scale": {"type": float, "required": True}},
     ["scale should be <class 'float'> type, not <class 'str'>."]),
    ({"flag": 1}, {"flag": {"type": bool, "required": True}},
     ["flag should be <class 'bool'> type, not <class 'int'>."]),
    ({}, {"prompt": {"type": str, "required": True}}, ["prompt is a required input."]),
    ({"x": 1}, {}, ["Unexpected input. x is not a valid input option."]),
    ({}, {"seed": {"type": int, "required": False}}, ["Schema error, missing default value for seed."]),
    # A rule without "required" reads as a missing required input.
    ({"n": 1}, {"n": {"type": int}}, ["n is a required input."]),
    ({"n": -1}, {"n": {"type": int, "required": True, "constraints": lambda v: v > 0}},
     ["n does not meet the constraints."]),
    ({}, {"n": "not json"},
     ["Schema error, n is not a dictionary.", "Schema error, missing type for n.", "n is a required input."]),
])
def test_each_problem_has_runpods_message(raw: Any, schema: Any, errors: Any) -> None:
    assert validate(raw, schema) == {"errors": errors}


def test_messages_come_in_runpods_order() -> None:
    # Unknown keys first, then presence for every key, then types.
    schema = {"n": {"type": int, "required": True}, "m": {"type": int, "required": True}}
    assert validate({"extra": 1, "n": "s"}, schema) == {"errors": [
        "Unexpected input. extra is not a valid input option.",
        "m is a required input.",
        "n should be <class 'int'> type, not <class 'str'>.",
    ]}


def test_a_value_of_the_defaults_class_passes_without_the_type_check() -> None:
    assert validate({"n": "x"}, {"n": {"type": int, "required": False, "default": "y"}}) == {
        "validated_input": {"n": "x"}}


def test_constraints_see_a_default_of_none() -> None:
    schema = {"n": {"type": int, "required": False, "default": None, "constraints": lambda v: v is None}}
    assert validate({}, schema) == {"validated_input": {"n": None}}


def test_json_text_rules_are_decoded_in_the_schema() -> None:
    schema: Dict[str, Any] = {"n": '{"type": "int", "required": false, "default": 3}'}
    assert validate({}, schema) == {"validated_input": {"n": 3}}
    assert schema == {"n": {"type": "int", "required": False, "default": 3}}


def test_a_json_rule_with_a_type_name_raises_as_in_runpod() -> None:
    # The decoded "type" is the text "int", which isinstance() refuses.
    with pytest.raises(TypeError, match="isinstance"):
        validate({"n": 3}, {"n": '{"type": "int", "required": true}'})


def test_a_present_key_whose_rules_lack_a_type_raises_keyerror_as_in_runpod() -> None:
    with pytest.raises(KeyError, match="type"):
        validate({"n": 1}, {"n": {"required": True}})
