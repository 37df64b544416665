"""A package's face whose names are imported on first use (PEP 562's module `__getattr__`).

A face (docs/internals.md, Faces) lets other packages import a name from
the package rather than from the module inside it that defines it. For the
packages high in the floors (control, router, onboard, guard, ...) an
`__init__` that imported every such module would load the whole package,
and what it imports, for any one name: `llmgw --help` would pay for
aiohttp, asyncssh and the control plane. So their `__init__` says where
each name lives, and the module is imported when the name is first asked
for, as a `from llmgw.control import AdminClient` asks at once:

    if TYPE_CHECKING:  # the same names, for mypy and a reader
        from llmgw.control.adminclient import AdminClient
    __all__ = ["AdminClient"]
    __getattr__ = lazy_face(__name__, {"adminclient": ["AdminClient"]})

A name is then kept on the package, so it is looked up once.
"""

from __future__ import annotations

import importlib
import sys
from collections.abc import Callable, Iterable, Mapping


def lazy_face(package: str, names: Mapping[str, Iterable[str]]) -> Callable[[str], object]:
    """The package's `__getattr__`: `names` maps each module (relative to the package) to the names of the
    face it defines, as the `if TYPE_CHECKING:` imports beside it list them."""
    where = {name: module for module, defined in names.items() for name in defined}

    def __getattr__(name: str) -> object:
        module = where.get(name)
        if module is None:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        value = getattr(importlib.import_module(f"{package}.{module}"), name)
        setattr(sys.modules[package], name, value)
        return value
    return __getattr__
