"""JSON schemas a model can trust, and validation against them, from Python annotations.

Library choice: **pydantic v2** (``TypeAdapter``, ``create_model``) generates the JSON
schemas and validates (and coerces) what a model sends. It covers every annotation a tool
or an output type uses -- ``Optional``, unions, ``Literal`` (an ``enum``), ``list[T]``
(with ``items``), ``dict[str, T]``, nested dataclasses and TypedDicts, defaults and
required fields -- in one well-kept, fast (Rust core) library that both provider SDKs
already depend on. Writing a schema generator and a validator by hand would duplicate it
badly (a hand-written one once turned ``int | None`` into ``"string"``).
**docstring_parser** reads the descriptions of a function and of its parameters from a
docstring in Google, NumPy or Sphinx (reST) style, detecting which.

attrs classes need care: pydantic does not take them natively. :func:`pydantic_type`
rewrites an annotation so that each attrs class in it becomes a pydantic model with the
same fields (types rewritten the same way, defaults kept) that validates *into* an
instance of the attrs class and serialises one back -- all inside pydantic's own schema
machinery, so nesting (``list[Point]``, ``Point | None``, an attrs field of an attrs
type) works. An attrs class nested inside a dataclass or TypedDict is not rewritten.

Strict mode (OpenAI's ``strict``, Anthropic's ``strict``) needs a closed schema: every
object lists all its properties as required and forbids others. :func:`strict_schema`
derives one when the schema allows it (optional parameters become nullable: ``null``
means "use the default"), or says it cannot (free-form objects, ``dict[str, T]``).
"""

from __future__ import annotations

import functools
import types
from collections.abc import Callable
from typing import Annotated, Any, Literal, Union, get_args, get_origin, get_type_hints

import attrs
import docstring_parser
import pydantic
from pydantic_core import core_schema

from stores import JSON

__all__ = ["Docs", "describe_errors", "parse_docs", "pydantic_type", "strict_schema"]


def pydantic_type(tp: Any) -> Any:
    """``tp`` with every attrs class in it replaced by a pydantic-ready equivalent."""
    if isinstance(tp, type) and attrs.has(tp):
        return _attrs_type(tp)
    origin, args = get_origin(tp), get_args(tp)
    if origin is None or not args or origin is Literal:
        return tp
    if origin is Annotated:
        return Annotated[(pydantic_type(args[0]), *tp.__metadata__)]
    new = tuple(pydantic_type(a) for a in args)
    if new == args:
        return tp
    if origin in (Union, types.UnionType):
        return Union[new]  # noqa: UP007 (built from a tuple)
    return origin[new]


@functools.cache
def _attrs_type(cls: type) -> Any:
    """An attrs class as ``Annotated[cls, <schema>]``: validated through a generated
    pydantic model into a ``cls`` instance, serialised back through the same model."""
    hints = get_type_hints(cls, include_extras=True)
    fields: dict[str, Any] = {}
    names: dict[str, str] = {}  # init argument -> attribute name
    for field in attrs.fields(cls):
        if not field.init:
            continue
        arg = field.alias or field.name
        names[arg] = field.name
        tp = pydantic_type(hints.get(field.name, Any))
        default = field.default
        if default is attrs.NOTHING:
            fields[arg] = (tp, ...)
        elif isinstance(default, attrs.Factory):  # type: ignore[arg-type]
            if default.takes_self:
                fields[arg] = (tp, None)
            else:
                factory = default.factory
                fields[arg] = (tp, pydantic.Field(default_factory=factory))
        else:
            fields[arg] = (tp, default)
    model = pydantic.create_model(cls.__name__, __doc__=cls.__doc__, **fields)

    def to_instance(value: pydantic.BaseModel) -> Any:
        return cls(**{arg: getattr(value, arg) for arg in names})

    def to_model(value: Any) -> pydantic.BaseModel:
        fields = {arg: getattr(value, name) for arg, name in names.items()}
        built: pydantic.BaseModel = model.model_construct(**fields)
        return built

    def schema(_source: Any, handler: pydantic.GetCoreSchemaHandler) -> core_schema.CoreSchema:
        inner = handler(model)
        return core_schema.no_info_after_validator_function(
            to_instance,
            inner,
            serialization=core_schema.plain_serializer_function_ser_schema(
                to_model, return_schema=inner
            ),
        )

    return Annotated[cls, pydantic.GetPydanticSchema(schema)]


@attrs.frozen
class Docs:
    """What a docstring says: the description and each parameter's."""

    description: str
    params: dict[str, str]


def parse_docs(fn: Callable[..., Any]) -> Docs:
    """The description (short and long) and parameter descriptions of ``fn``'s
    docstring, in Google, NumPy or Sphinx style (detected)."""
    doc = fn.__doc__
    if not doc:
        return Docs("", {})
    parsed = docstring_parser.parse(doc)
    parts = [p for p in (parsed.short_description, parsed.long_description) if p]
    params = {p.arg_name: p.description for p in parsed.params if p.description}
    return Docs("\n\n".join(parts).strip(), params)


def describe_errors(error: pydantic.ValidationError) -> str:
    """A validation error as lines a model can act on: where, what, and what it sent."""
    lines = []
    for err in error.errors(include_url=False):
        where = ".".join(str(part) for part in err["loc"]) or "(arguments)"
        got = "" if err["type"] == "missing" else f" (got {err['input']!r})"
        lines.append(f"- {where}: {err['msg']}{got}")
    return "\n".join(lines)


_SCHEMA_KEYS = ("type", "anyOf", "oneOf", "allOf", "$ref", "enum", "const")


def strict_schema(schema: dict[str, JSON]) -> dict[str, JSON] | None:
    """``schema`` made closed for strict mode, or ``None`` if it cannot be (an object
    with free-form keys, an untyped value, a tuple). Optional properties of the top
    object become required and nullable; a nested object with optional properties makes
    it impossible (its defaults could not be told from an explicit null)."""
    try:
        return _strict(schema, top=True)  # type: ignore[return-value]
    except _NotStrict:
        return None


class _NotStrict(Exception):
    pass


def _strict(node: JSON, *, top: bool = False) -> JSON:
    if not isinstance(node, dict):
        return node
    out: dict[str, JSON] = {}
    for key, value in node.items():
        if key in ("$defs", "properties") and isinstance(value, dict):
            out[key] = {k: _strict(v) for k, v in value.items()}
        elif key in ("anyOf", "oneOf", "allOf") and isinstance(value, list):
            out[key] = [_strict(v) for v in value]
        elif key == "items":
            out[key] = _strict(value)
        elif key == "prefixItems":
            raise _NotStrict
        else:
            out[key] = value
    if not any(k in out for k in _SCHEMA_KEYS) and "$defs" not in node:
        raise _NotStrict  # an untyped value
    if out.get("type") == "object":
        if out.get("additionalProperties", False) is not False:
            raise _NotStrict
        properties = out.get("properties", {})
        assert isinstance(properties, dict)
        if not properties and not top:
            raise _NotStrict
        required = out.get("required", [])
        assert isinstance(required, list)
        optional = [name for name in properties if name not in required]
        if optional and not top:
            raise _NotStrict
        for name in optional:
            prop = properties[name]
            if not _allows_null(prop) and isinstance(prop, dict):
                inner = dict(prop)
                keys = ("title", "description", "default")
                outer: dict[str, JSON] = {k: inner.pop(k) for k in keys if k in prop}
                properties[name] = {**outer, "anyOf": [inner, {"type": "null"}]}
        out["required"] = list(properties)
        out["additionalProperties"] = False
    return out


def _allows_null(node: JSON) -> bool:
    if not isinstance(node, dict):
        return False
    if node.get("type") == "null":
        return True
    return any(_allows_null(v) for v in node.get("anyOf", []) or [])  # type: ignore[union-attr]
