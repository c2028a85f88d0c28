"""Name -> implementation registries (formats, backends, power sources).

Implementations register themselves by name; a failed lookup lists what is available.
Entries may be registered as ``"module:attr"`` strings so that looking a name up never
imports a heavy module until that entry is actually used.
"""

from __future__ import annotations

import importlib
from typing import Any, Generic, TypeVar

from .errors import EdgeSDKError

T = TypeVar("T")


def resolve(target: Any) -> Any:
    """``target`` itself, or the object a lazy ``"module:attr"`` string names (imported now)."""
    if isinstance(target, str):
        mod, _, attr = target.partition(":")
        return getattr(importlib.import_module(mod), attr)
    return target


class Registry(Generic[T]):
    """A named collection of implementations.

    Args:
        kind: What the entries are, for error messages (e.g. "backend").
        error: The error class raised on a failed lookup.
    """

    def __init__(self, kind: str, error: type[EdgeSDKError] = EdgeSDKError):
        self.kind = kind
        self.error = error
        self._entries: dict[str, Any] = {}

    def register(self, name: str, target: Any = None):
        """Register ``target`` (an object or a lazy ``"module:attr"`` string) under ``name``.

        Usable as a decorator when ``target`` is omitted.
        """
        if target is not None:
            self._entries[name] = target
            return target

        def deco(obj):
            self._entries[name] = obj
            return obj

        return deco

    def names(self) -> list[str]:
        """Registered names, sorted."""
        return sorted(self._entries)

    def __contains__(self, name: str) -> bool:
        return name in self._entries

    def get(self, name: str) -> T:
        """Return the entry for ``name``, importing it if it was registered lazily.

        Raises:
            EdgeSDKError: (of the registry's error class) when ``name`` is unknown.
        """
        try:
            entry = self._entries[name]
        except KeyError:
            raise self.error(
                f"Unknown {self.kind} '{name}'.",
                f"Available: {', '.join(self.names()) or '(none)'}",
            ) from None
        if isinstance(entry, str):
            entry = resolve(entry)
            self._entries[name] = entry
        return entry

    def unregister(self, name: str) -> None:
        """Forget ``name`` (unknown names are ignored)."""
        self._entries.pop(name, None)
