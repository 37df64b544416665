"""The one type for JSON from outside: a client's body, an engine's answer, a kept answer.

These documents are read field by field with isinstance checks where they
are used (shapes.py checks a body's schema, the translators read what they
know), so they stay `dict[str, Any]` after parsing; what the router makes
of them is typed (Call, Prepared, the cache's Entry).
"""

from __future__ import annotations

from typing import Any, TypeAlias

JSON: TypeAlias = dict[str, Any]
