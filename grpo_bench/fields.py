"""Field types of the run config: which YAML / ``key=value`` values a field accepts, its declared
constraints, and the one-line error when a value breaks one (pydantic validates; config/run.py
declares the fields).

A field's type says everything about one value: ``Annotated[Int, Field(ge=1), upto(1000)]``,
``Literal["no", "bf16", "fp16"]``, ``MaybeFloat`` (a finite float or null). ``FieldRules(cls)``
checks a value against the field of that name and words a failure as
``<where>config key 'lr' expects float, got 'abc'``.
"""

from __future__ import annotations

import dataclasses
import types
import typing
from typing import Annotated, Any, Literal

import annotated_types
from pydantic import BeforeValidator, Field, TypeAdapter, ValidationError
from pydantic.fields import FieldInfo

from grpo_bench import safe_yaml
from grpo_bench.errors import UserError, unknown
from grpo_bench.preflight import shown


# --- conversions: pydantic's lax mode does most ('yes'/'on'/'true' -> True, '1e-4' -> 1e-4,
# 1000.0 -> 1000); these add the few this project's files rely on and pydantic leaves out.
def _not_a_bool(value: Any) -> Any:
    """YAML's ``true`` is no number and no name."""
    if isinstance(value, bool):
        raise ValueError("a bool")
    return value


def _whole_number(value: Any) -> Any:
    """Ints may be written as floats, ``updates: 1e3`` (YAML reads 1e3 as text); whole numbers only."""
    _not_a_bool(value)
    if isinstance(value, str):
        try:
            number = float(value)
        except ValueError:
            return value  # pydantic names the type
        return int(number) if number.is_integer() else value
    return value


def _name(value: Any) -> Any:
    """Names may be written as numbers (``setting: 1`` is '1')."""
    _not_a_bool(value)
    return str(value) if isinstance(value, (int, float)) else value


def _list(value: Any) -> Any:
    """On the command line a list is ``a,b`` or ``[a, b]``."""
    if not isinstance(value, str):
        return value
    if not value.strip().startswith("["):
        return value.split(",")
    try:
        return safe_yaml.load_text(value, "list")
    except UserError:
        raise ValueError("not a list") from None


def _null(*words: str) -> BeforeValidator:
    """'null' (and for non-text fields 'none') given for an optional field means None (its default)."""
    return BeforeValidator(lambda v: None if isinstance(v, str) and v.lower() in words else v)


# --- the types fields are declared with ---------------------------------------------------------
Int = Annotated[int, BeforeValidator(_whole_number)]
Float = Annotated[float, BeforeValidator(_not_a_bool), Field(allow_inf_nan=False)]
"""Finite: inf passes every range check and fails an hour later."""
Name = Annotated[str, BeforeValidator(_name)]
Positive = Annotated[Float, Field(gt=0)]
AtLeast1 = Annotated[Int, Field(ge=1)]
NonNegative = Annotated[Int, Field(ge=0)]
# Optional method options: None = the method's default. 'none' stays a real value of text fields (kl: none).
MaybeFloat = Annotated[Float | None, _null("null", "none")]
MaybeInt = Annotated[Int | None, _null("null", "none")]
MaybeBool = Annotated[bool | None, _null("null", "none")]
MaybeName = Annotated[Name | None, _null("null")]
MaybeInts = Annotated[Annotated[list[Int], BeforeValidator(_list)] | None, _null("null", "none")]
Names = Annotated[list[Name], BeforeValidator(_list)]
Ints = Annotated[list[Int], BeforeValidator(_list)]


YAML_WORDS = {False: "no", True: "yes"}
"""The word an unquoted YAML bool most likely was, for fields whose values are words."""


def upto(most: int) -> FieldInfo:
    """Values past ``most`` are typos (``updates: 1e12``) that would only hang or exhaust memory."""
    return Field(le=most)


# A field's Field(json_schema_extra=...) may word its bound errors: {"range": "0..2**63-1"} replaces
# either bound, {"below": "why"} explains the lower one.
_RULES = {
    "greater_than_equal": lambda ctx, is_float: f">= {ctx.get('ge')}",
    "greater_than": lambda ctx, is_float: f"{'a finite number ' if is_float else ''}> {ctx.get('gt')}",
    "less_than_equal": lambda ctx, is_float: f"<= {ctx.get('le')}",
    "finite_number": lambda ctx, is_float: "a finite number",
}


def _bare(tp: Any) -> Any:
    """A type without its ``Annotated`` metadata."""
    while typing.get_origin(tp) is Annotated:
        tp = tp.__origin__
    return tp


def _type_name(tp: Any) -> str:
    if typing.get_origin(tp) is list:
        (inner,) = typing.get_args(tp)
        return f"list[{_type_name(_bare(inner))}]"
    return getattr(tp, "__name__", str(tp))


class FieldRules:
    """The declared field types of a dataclass, checked with pydantic, with one-line errors."""

    def __init__(self, cls: type) -> None:
        self.hints = typing.get_type_hints(cls, include_extras=True)
        self._adapters: dict[str, TypeAdapter] = {}

    def check(self, name: str, value: Any, where: str = "") -> Any:
        """``value`` converted to field ``name``'s type, or a UserError naming the key and what it allows.

        YAML reads an unquoted ``no`` / ``yes`` as a bool; a field whose choices include the word takes
        it as that word (``mixed_precision: no``)."""
        choices = self.choices(name)
        if isinstance(value, bool) and choices and YAML_WORDS[value] in choices:
            value = YAML_WORDS[value]
        if name not in self._adapters:
            self._adapters[name] = TypeAdapter(self.hints[name])
        try:
            return self._adapters[name].validate_python(value)
        except ValidationError as exc:
            raise self._error(name, value, exc, where) from None

    def declared(self, name: str) -> tuple[Any, bool, dict[str, Any]]:
        """(the field's value type, whether it may be null, the notes of its ``Field(json_schema_extra=...)``)."""
        hint, notes = self.hints[name], {}
        for meta in getattr(hint, "__metadata__", ()):
            if isinstance(meta, FieldInfo) and isinstance(meta.json_schema_extra, dict):
                notes.update(meta.json_schema_extra)
        tp = _bare(hint)
        args = typing.get_args(tp)
        if typing.get_origin(tp) in (typing.Union, types.UnionType) and type(None) in args:
            return _bare(next(a for a in args if a is not type(None))), True, notes
        return tp, False, notes

    def is_text(self, name: str) -> bool:
        """A field whose values are words (a name or a choice of words), not numbers or bools."""
        tp = self.declared(name)[0]
        if typing.get_origin(tp) is Literal:
            return all(isinstance(c, str) for c in typing.get_args(tp))
        return tp is str

    def choices(self, name: str) -> tuple[Any, ...] | None:
        """The choices of a ``Literal`` field (None for other fields)."""
        tp = self.declared(name)[0]
        return typing.get_args(tp) if typing.get_origin(tp) is Literal else None

    def upper_bounds(self) -> dict[str, Any]:
        """The declared upper bounds (``upto``), by field."""
        return {name: rule.le for name, hint in self.hints.items() for meta in getattr(hint, "__metadata__", ())
                if isinstance(meta, FieldInfo) for rule in meta.metadata if isinstance(rule, annotated_types.Le)}

    def _error(self, name: str, value: Any, exc: ValidationError, where: str) -> UserError:
        """One line for the first rule ``value`` breaks: a choice, a bound, finiteness, else the type."""
        tp, optional, notes = self.declared(name)
        choices = self.choices(name)
        if choices is not None and value is not None:
            if isinstance(value, bool):  # mixed_precision: no
                return UserError(f"{unknown(name, value, choices, where)} (YAML reads an unquoted yes/no/on/off as "
                                 f"{str(value).lower()}: quote it)")
            return unknown(name, value, choices, where)
        for err in exc.errors():
            if err["type"] not in _RULES:
                continue
            rule = _RULES[err["type"]](err.get("ctx") or {}, tp is float)
            if "range" in notes and err["type"] in ("greater_than_equal", "less_than_equal"):
                rule = f"in {notes['range']}"
            why = f" ({notes['below']})" if "below" in notes and err["type"] == "greater_than_equal" else ""
            return UserError(f"{where}config key {name!r} must be {rule}{why}, got {shown(err.get('input', value))}")
        if value is None:
            return UserError(f"{where}config key {name!r} cannot be null")
        return UserError(f"{where}config key {name!r} expects {_type_name(tp)}{' or null' if optional else ''}, "
                         f"got {shown(value)}")


def execution(default: Any = dataclasses.MISSING, *, factory: Any = dataclasses.MISSING) -> Any:
    """Declare a field that says where or how a run computes, or what it records on the way, not what
    it computes: it is left out of the cell id (config/identity.py), so changing it never re-keys a cell."""
    return dataclasses.field(default=default, default_factory=factory, metadata={"execution": True})
