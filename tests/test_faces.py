"""Each package's face offers what its `__all__` says, and a lazy face loads a module only when asked (issue 26).

A face is a package's `__init__` (docs/internals.md, Faces); the packages
high in the floors import each name from its module on first use
(llmgw/lazyface.py), so a name listed there but misspelt in the map, or
moved out of its module, would only fail when a reader first asks for it.
"""

from __future__ import annotations

import importlib
import pkgutil
import subprocess
import sys

import pytest

import llmgw

PACKAGES = sorted(m.name for m in pkgutil.iter_modules(llmgw.__path__, "llmgw.") if m.ispkg)
LAZY = ["llmgw.agent", "llmgw.console", "llmgw.control", "llmgw.onboard", "llmgw.router"]


@pytest.mark.parametrize("name", PACKAGES)
def test_every_name_a_face_lists_is_there(name):
    package = importlib.import_module(name)
    missing = [n for n in getattr(package, "__all__", ()) if not hasattr(package, n)]
    assert missing == []


def test_a_name_not_on_a_lazy_face_is_an_attribute_error_naming_it():
    import llmgw.control

    with pytest.raises(AttributeError, match="module 'llmgw.control' has no attribute 'NoSuchName'"):
        llmgw.control.NoSuchName  # noqa: B018 - the lookup is what is tested


def test_a_lazy_face_hands_out_the_very_object_its_module_defines():
    from llmgw.control import AdminClient
    from llmgw.control.adminclient import AdminClient as defined

    assert AdminClient is defined


@pytest.mark.parametrize("name", LAZY)
def test_importing_a_lazy_face_loads_none_of_its_modules(name):
    # A fresh interpreter: this one has imported much of llmgw already.
    script = f"import sys, {name}; print(' '.join(m for m in sys.modules if m.startswith('{name}.')))"
    loaded = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, check=True).stdout.split()
    assert loaded == []
