"""Structured output: ``Agent(output_type=...)``.

An output type is an attrs class, a dataclass, a TypedDict, any other annotation
pydantic can validate (see ``_schema``), or a JSON schema given as a ``dict``. Its JSON
schema is sent to the provider (OpenAI ``response_format`` / ``text.format``, Anthropic
``output_config.format``; strict when the schema can be closed), the model's final text
is parsed and validated, and the run stores the validated value in its JSON form (the
checkpoint's ``output``). :attr:`RunResult.final_output` is the typed value, rebuilt from
that JSON on replay, so a stored output round-trips exactly.

A dict schema is validated with **jsonschema** (the reference JSON-schema validator for
Python); its value stays plain JSON.
"""

from __future__ import annotations

import json
import re
from typing import Any

import attrs
import jsonschema
import pydantic

from stores import JSON, InvalidArgumentError, TidelogError, decode_json, encode_json

from ._schema import describe_errors, pydantic_type, strict_schema

__all__ = ["OutputSchema", "OutputValidationError"]


class OutputValidationError(TidelogError):
    """The model's final answer does not fit the agent's ``output_type``. The run fails
    (its checkpoint says so, with this message) and can be resumed: the model is asked
    again. ``text`` is what it answered, ``problems`` what is wrong."""

    def __init__(self, agent: str, text: str, problems: str) -> None:
        self.agent = agent
        self.text = text
        self.problems = problems
        super().__init__(
            f"agent {agent!r}: the final answer does not fit the output type:\n{problems}"
        )


@attrs.frozen(eq=False)
class OutputSchema:
    """An output type, ready to send and to check."""

    name: str
    schema: dict[str, JSON]
    strict: bool
    adapter: pydantic.TypeAdapter[Any] | None
    validator: jsonschema.protocols.Validator | None

    @classmethod
    def of(cls, output_type: Any) -> OutputSchema:
        """Build it; raises :class:`~stores.InvalidArgumentError` for a type with no JSON
        schema or an invalid JSON schema."""
        if isinstance(output_type, dict):
            try:
                schema: Any = decode_json(encode_json(output_type))
                validator_cls = jsonschema.validators.validator_for(schema)
                validator_cls.check_schema(schema)
            except (jsonschema.SchemaError, InvalidArgumentError) as exc:
                raise InvalidArgumentError(
                    f"output_type is not a valid JSON schema: {exc}"
                ) from exc
            assert isinstance(schema, dict)
            name = str(schema.get("title", "output"))
            strict = _strict_exact(schema)
            return cls(
                _clean(name),
                strict or schema,
                strict is not None,
                None,
                validator_cls(schema),
            )
        try:
            adapter: pydantic.TypeAdapter[Any] = pydantic.TypeAdapter(pydantic_type(output_type))
            schema = adapter.json_schema()
        except (pydantic.PydanticSchemaGenerationError, pydantic.PydanticUserError) as exc:
            raise InvalidArgumentError(
                f"output_type {output_type!r}: no JSON schema: {exc}"
            ) from exc
        name = getattr(output_type, "__name__", None) or str(schema.get("title", "output"))
        strict = _strict_exact(schema)
        return cls(_clean(name), strict or schema, strict is not None, adapter, None)

    def request_form(self) -> dict[str, JSON]:
        """What a :class:`ModelRequest` carries: ``{"name", "schema", "strict"}``."""
        return {"name": self.name, "schema": self.schema, "strict": self.strict}

    def parse(self, agent: str, text: str) -> tuple[JSON, Any]:
        """The stored (JSON) form and the typed value of a final answer.

        Raises :class:`OutputValidationError`."""
        if self.adapter is not None:
            try:
                value = self.adapter.validate_json(text)
            except pydantic.ValidationError as exc:
                raise OutputValidationError(agent, text, describe_errors(exc)) from None
            return self.adapter.dump_python(value, mode="json"), value
        try:
            data = json.loads(text)
        except ValueError as exc:
            raise OutputValidationError(agent, text, f"- not JSON: {exc}") from None
        assert self.validator is not None
        errors = sorted(self.validator.iter_errors(data), key=lambda e: list(e.path))
        if errors:
            problems = "\n".join(
                f"- {'.'.join(map(str, e.path)) or '(root)'}: {e.message}" for e in errors
            )
            raise OutputValidationError(agent, text, problems)
        return data, data

    def load(self, stored: JSON) -> Any:
        """The typed value of a stored output (on replay)."""
        if self.adapter is None:
            return stored
        return self.adapter.validate_python(stored)


def _strict_exact(schema: dict[str, JSON]) -> dict[str, JSON] | None:
    """The strict form of ``schema``, unless closing it would need nullable stand-ins
    for defaults (an output has no "null means the default" convention)."""
    strict = strict_schema(schema)
    required = schema.get("required", [])
    properties = schema.get("properties", {})
    if strict is None or not isinstance(required, list) or not isinstance(properties, dict):
        return None
    return strict if sorted(map(str, required)) == sorted(properties) else None


def _clean(name: str) -> str:
    """A schema name the providers accept (letters, digits, ``_`` and ``-``)."""
    return re.sub(r"[^A-Za-z0-9_-]", "_", name)[:64] or "output"
