"""Strict parsing of plain dicts (from TOML/JSON) into typed dataclasses.

Unknown keys, missing required keys, wrong types and values outside a ``Literal`` are
errors that name the file, the dotted key and what is allowed. Used by profiles and the
manifest so that both read untrusted files the same way.
"""

from __future__ import annotations

import dataclasses
import types
import typing
from typing import Any, Literal, Union, get_args, get_origin

from .errors import EdgeSDKError

_MISSING = dataclasses.MISSING


def _type_name(tp: Any) -> str:
    origin = get_origin(tp)
    if origin is Literal:
        return " | ".join(repr(a) for a in get_args(tp))
    if origin in (Union, types.UnionType):
        return " or ".join(_type_name(a) for a in get_args(tp))
    if origin in (list, tuple):
        args = get_args(tp)
        return f"list of {_type_name(args[0])}" if args else "list"
    if origin is dict:
        return "table"
    if dataclasses.is_dataclass(tp):
        return "table"
    return getattr(tp, "__name__", str(tp))


def parse(cls: type, data: Any, *, where: str, key: str = "", error: type[EdgeSDKError]):
    """Build dataclass ``cls`` from ``data``, checking every key and type.

    Args:
        cls: A dataclass type (fields annotated with builtins, Literal, Optional, list, dict).
        data: The parsed TOML/JSON value.
        where: The file (or other source) for error messages.
        key: Dotted prefix of this value inside the file.
        error: The error class to raise.

    Returns:
        An instance of ``cls``.

    Raises:
        EdgeSDKError: (``error``) naming the file, key and allowed values.
    """
    return _convert(cls, data, where, key, error)


def _fail(error, where, key, msg, hint=None):
    loc = f"{where}: key '{key}'" if key else where
    raise error(f"{loc}: {msg}", hint)


def _convert(tp: Any, value: Any, where: str, key: str, error):
    origin = get_origin(tp)
    if tp is Any:
        return value
    if dataclasses.is_dataclass(tp):
        if not isinstance(value, dict):
            _fail(error, where, key, f"expected a table, got {type(value).__name__}")
        hints = typing.get_type_hints(tp)
        fields = {f.name: f for f in dataclasses.fields(tp) if f.init}
        unknown = sorted(set(value) - set(fields))
        if unknown:
            sub = f"{key}.{unknown[0]}" if key else unknown[0]
            _fail(error, where, sub, "unknown key",
                  f"allowed keys here: {', '.join(sorted(fields))}")
        kwargs = {}
        for name, f in fields.items():
            sub = f"{key}.{name}" if key else name
            if name in value:
                kwargs[name] = _convert(hints[name], value[name], where, sub, error)
            elif f.default is _MISSING and f.default_factory is _MISSING:
                _fail(error, where, sub, f"required key is missing (expected {_type_name(hints[name])})")
        return tp(**kwargs)
    if origin is Literal:
        allowed = get_args(tp)
        if value not in allowed:
            _fail(error, where, key, f"invalid value {value!r}",
                  f"allowed values: {', '.join(repr(a) for a in allowed)}")
        return value
    if origin in (Union, types.UnionType):
        args = get_args(tp)
        if value is None and type(None) in args:
            return None
        errors = []
        for arg in args:
            if arg is type(None):
                continue
            try:
                return _convert(arg, value, where, key, error)
            except EdgeSDKError as exc:
                errors.append(exc)
        if len(errors) == 1:
            raise errors[0]
        _fail(error, where, key, f"expected {_type_name(tp)}, got {value!r}")
    if origin in (list, tuple):
        if not isinstance(value, list | tuple):
            _fail(error, where, key, f"expected {_type_name(tp)}, got {type(value).__name__}")
        (item_tp, *_rest) = get_args(tp) or (Any,)
        items = [_convert(item_tp, v, where, f"{key}[{i}]", error) for i, v in enumerate(value)]
        return items if origin is list else tuple(items)
    if origin is dict:
        if not isinstance(value, dict):
            _fail(error, where, key, f"expected a table, got {type(value).__name__}")
        k_tp, v_tp = get_args(tp) or (str, Any)
        return {k: _convert(v_tp, v, where, f"{key}.{k}", error) for k, v in value.items()}
    if tp is float:
        if isinstance(value, bool) or not isinstance(value, int | float):
            _fail(error, where, key, f"expected a number, got {value!r}")
        return float(value)
    if tp is int:
        if isinstance(value, bool) or not isinstance(value, int):
            _fail(error, where, key, f"expected an integer, got {value!r}")
        return value
    if tp is bool:
        if not isinstance(value, bool):
            _fail(error, where, key, f"expected true or false, got {value!r}")
        return value
    if tp is str:
        if not isinstance(value, str):
            _fail(error, where, key, f"expected a string, got {value!r}")
        return value
    raise TypeError(f"typed.parse: unsupported annotation {tp!r} at {key}")  # programming error


def to_dict(obj: Any) -> Any:
    """Dataclass -> plain dict (JSON/TOML friendly), recursively."""
    if dataclasses.is_dataclass(obj):
        # A field marked ``omit_if_none`` is left out while unset, so files that do not use it
        # stay readable by versions that predate it.
        return {f.name: to_dict(getattr(obj, f.name)) for f in dataclasses.fields(obj)
                if not (f.metadata.get("omit_if_none") and getattr(obj, f.name) is None)}
    if isinstance(obj, list | tuple):
        return [to_dict(v) for v in obj]
    if isinstance(obj, dict):
        return {k: to_dict(v) for k, v in obj.items()}
    return obj
