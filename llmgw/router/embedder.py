"""The router's Embedder (llmgw.router.similar): the catalog's embedding model, asked through the router's own
endpoints.

For projects with `llmgw keys cache --similar`: a question is embedded by
`router.cache.embedding_model` before it is compared with the questions
already answered in its conversation. The model is asked at its local
endpoints only — the replicas and static endpoints the registry holds —
never an outside provider's (`endpoint.external`): a question is the
client's text, and the cache must not send it anywhere the client did not.

Asked as the question's project would ask it: only when the key asking may
use the embedding model (its limits' models, from org to key). The lookup
is the gateway's own work, so the embedding is not counted against that
key's limits or budgets and leaves no usage row; it does count in the
endpoint's in-flight requests, which the scheduler and admission read, and
its failures count against the endpoint's breaker as a client's would.

Each call is bounded by router.cache.embedding_budget, outside (embed_question's
timeout) and here (the HTTP request's own), so a hung replica costs the
lookup and nothing more.
"""

from __future__ import annotations

import aiohttp
import orjson

from llmgw.router import probe, scheduler
from llmgw.router.endpoint import Endpoint
from llmgw.router.registry import ModelEntry
from llmgw.router.similar import EMBED_BUDGET

# Who asked, to a breaker (breaker.py): the similar cache's questions, all as one asker.
ASKER = "similar-cache"


class EmbeddingFailed(Exception):
    """No local endpoint of the embedding model gave a vector; the question is looked up exactly."""


class CatalogEmbedder:
    """Embeds a question with a catalog model, trying its local endpoints best first."""

    def __init__(self, session: aiohttp.ClientSession, model: ModelEntry, budget: float = EMBED_BUDGET):
        self.session = session
        self.model = model
        self._timeout = aiohttp.ClientTimeout(total=budget)

    @staticmethod
    def local(model: ModelEntry) -> list[Endpoint]:
        """The endpoints a question may be sent to: the model's own, never an outside provider's."""
        return [e for e in model.usable() if not e.external]

    async def embed(self, text: str) -> list[float]:
        # The batch profile (the shortest queue): an embedding has no session
        # to keep and its replica's KV cache does not matter.
        candidates = scheduler.choose(self.local(self.model), "batch")
        last = "no local endpoint can take requests now"
        for endpoint in candidates:
            if not scheduler.take(endpoint):
                continue
            endpoint.in_flight += 1
            try:
                values = await self._ask(endpoint, text)
            except _Broken as e:
                # A 5xx may be this question's doing (its text came from a client): it counts as
                # one asker's, so alone it opens the breaker only if a health check fails too.
                if endpoint.breaker.failure(e.reason, None if e.unreachable else ASKER):
                    probe.check(self.session, endpoint, e.reason)
                last = f"{endpoint.id} {e.reason}"
                continue
            except EmbeddingFailed as e:
                # The endpoint answered, just not with a vector for us (a 4xx:
                # not an embedding model, a key it refuses): no verdict on it.
                endpoint.breaker.abandon()
                last = f"{endpoint.id} {e}"
                continue
            except BaseException:
                endpoint.breaker.abandon()  # out of time or cancelled: no verdict on the endpoint
                raise
            finally:
                endpoint.in_flight -= 1
            endpoint.breaker.success()
            return values
        raise EmbeddingFailed(f"{self.model.name}: {last}")

    async def _ask(self, endpoint: Endpoint, text: str) -> list[float]:
        body = {"model": endpoint.upstream_model, "input": text, "encoding_format": "float"}
        headers = {"Content-Type": "application/json"}
        if endpoint.api_key:
            headers["Authorization"] = f"Bearer {endpoint.api_key}"
        try:
            async with self.session.post(endpoint.url + "/embeddings", data=orjson.dumps(body), headers=headers,
                                         timeout=self._timeout) as response:
                raw = await response.read()
                status = response.status
        except TimeoutError:
            raise  # the budget is spent: the caller's timeout says so
        except aiohttp.ClientError as e:
            unreachable = isinstance(e, (aiohttp.ClientConnectorError, aiohttp.ConnectionTimeoutError))
            raise _Broken(f"connection failed: {type(e).__name__}", unreachable) from None
        if status >= 500 and status != 501:  # 501: it does not do embeddings, no fault of its health
            raise _Broken(f"answered {status}")
        if status >= 400:
            raise EmbeddingFailed(f"answered {status}")
        try:
            values = orjson.loads(raw)["data"][0]["embedding"]
        except (orjson.JSONDecodeError, KeyError, IndexError, TypeError):
            raise EmbeddingFailed("answered without an embedding") from None
        if not isinstance(values, list):
            raise EmbeddingFailed("answered without a list of numbers")
        return values


class _Broken(Exception):
    """The endpoint failed as a breaker counts failure: no connection, or a 5xx."""

    def __init__(self, reason: str, unreachable: bool = False):
        super().__init__(reason)
        self.reason = reason
        self.unreachable = unreachable  # no connection could be made: the engine's failure, whatever was asked
