"""The client APIs the router speaks, one object each (apis/base.py says what a shape does).

Adding a shape is a module here with a `Shape` subclass and its line in
SHAPES: the routes, the cache, the guardrails and the refusals find it there.
"""

from llmgw.router.apis.base import Prepared, Shape
from llmgw.router.apis.chat import CHAT
from llmgw.router.apis.completions import COMPLETIONS
from llmgw.router.apis.embeddings import EMBEDDINGS
from llmgw.router.apis.images import IMAGES
from llmgw.router.apis.messages import MESSAGES
from llmgw.router.apis.responses import RESPONSES
from llmgw.router.apis.workflows import WORKFLOWS

SHAPES: tuple[Shape, ...] = (CHAT, COMPLETIONS, EMBEDDINGS, MESSAGES, RESPONSES, IMAGES, WORKFLOWS)
_BY_API = {shape.api: shape for shape in SHAPES}
_BY_ROUTE = {shape.route: shape for shape in SHAPES if shape.route}


def by_api(api: str) -> Shape:
    """The shape named `api` (a usage row's, a call's, a kept answer's); KeyError for none."""
    return _BY_API[api]


def by_route(route: str) -> Shape:
    """The shape whose client path is `route` (/v1/chat/completions); KeyError for none."""
    return _BY_ROUTE[route]


__all__ = [
    "CHAT",
    "COMPLETIONS",
    "EMBEDDINGS",
    "IMAGES",
    "MESSAGES",
    "RESPONSES",
    "SHAPES",
    "WORKFLOWS",
    "Prepared",
    "Shape",
    "by_api",
    "by_route",
]
