"""``validate(raw_input, schema)``: check a job's input against a schema.

Results, error texts and their order are runpod 1.12.0's, so handler code that
branches on them keeps working. A schema maps each input key to its rules, a
dict with:

- ``type``: the class the value must be an instance of (``float`` also
  accepts an ``int`` and turns it into a float);
- ``required``: whether the key must be present;
- ``default``: the value used when an optional key is absent;
- ``constraints``: a callable that gets the value and returns truthy if it
  is acceptable.

Rules may also be given as JSON text; such entries are decoded in place in
``schema`` (runpod does the same, so a schema reused later sees the dicts).
Malformed schemas fail the way runpod's do: the same exceptions, from the
same steps.
"""

from __future__ import annotations

import json
from typing import Any, Dict, List, Union

UNEXPECTED_INPUT_ERROR = "Unexpected input. {} is not a valid input option."
MISSING_REQUIRED_ERROR = "{} is a required input."
MISSING_DEFAULT_ERROR = "Schema error, missing default value for {}."
MISSING_TYPE_ERROR = "Schema error, missing type for {}."
INVALID_TYPE_ERROR = "{} should be {} type, not {}."
CONSTRAINTS_ERROR = "{} does not meet the constraints."
SCHEMA_ERROR = "Schema error, {} is not a dictionary."

__all__ = ["validate"]


def validate(raw_input: Dict[str, Any], schema: Dict[str, Any]) -> Dict[str, Union[Dict[str, Any], List[str]]]:
    """Check ``raw_input`` against ``schema``.

    Returns ``{"validated_input": {...}}`` (the input with defaults filled in
    and ints given for ``float`` keys converted) when every rule holds, else
    ``{"errors": [message, ...]}`` listing every problem found.
    """
    errors: List[str] = []
    checked = raw_input.copy()
    # Four passes, each over every key, because the order of the messages
    # is part of runpod's behaviour: unknown keys, undecodable rules,
    # presence, then type and constraints.
    _unknown_keys(raw_input, schema, errors)
    _decode_text_rules(schema, errors)
    _presence(raw_input, schema, checked, errors)
    _types_and_constraints(schema, checked, errors)
    if errors:
        return {"errors": errors}
    return {"validated_input": checked}


def _unknown_keys(raw_input: Any, schema: Dict[Any, Any], errors: List[str]) -> None:
    for key in raw_input:
        if key not in schema:
            errors.append(UNEXPECTED_INPUT_ERROR.format(key))


def _decode_text_rules(schema: Dict[Any, Any], errors: List[str]) -> None:
    # Only a JSON syntax error becomes a message; rules that are neither a
    # dict nor text (a number, a list) raise json's TypeError, as in runpod.
    for key, rules in schema.items():
        if isinstance(rules, dict):
            continue
        try:
            schema[key] = json.loads(rules)
        except json.JSONDecodeError:
            errors.append(SCHEMA_ERROR.format(key))


def _presence(raw_input: Any, schema: Dict[Any, Any], checked: Any, errors: List[str]) -> None:
    # Rules left as undecodable text fall through here too: ``in`` on a
    # string is a substring test, which is what runpod's messages reflect.
    for key, rules in schema.items():
        if "type" not in rules:
            errors.append(MISSING_TYPE_ERROR.format(key))
        if "required" not in rules:
            errors.append(MISSING_REQUIRED_ERROR.format(key))
            continue
        required = bool(rules["required"])
        if key in raw_input:
            continue
        if required:
            errors.append(MISSING_REQUIRED_ERROR.format(key))
        elif "default" in rules:
            checked[key] = rules["default"]
        else:
            errors.append(MISSING_DEFAULT_ERROR.format(key))


def _types_and_constraints(schema: Dict[Any, Any], checked: Any, errors: List[str]) -> None:
    for key, rules in schema.items():
        if key in checked:
            try:
                if rules["type"] is float and type(checked[key]) in (int, float):
                    checked[key] = float(checked[key])
            except TypeError:
                # Rules that cannot be indexed by name (text that was not
                # JSON): the key is skipped, constraints included.
                continue
            # A value of the default's class is accepted as is, constraints
            # skipped as well.
            if "default" in rules and isinstance(checked[key], type(rules["default"])):
                continue
            if not isinstance(checked[key], rules["type"]):
                errors.append(INVALID_TYPE_ERROR.format(key, rules["type"], type(checked[key])))
        if "constraints" in rules and not rules["constraints"](checked.get(key)):
            errors.append(CONSTRAINTS_ERROR.format(key))
