"""The kinds of source a model's weights come from, one `Fetcher` each.

A Fetcher says whether a source is its kind, where in the cache directory a
copy of it lives, and how to ask for its bytes (URL and headers) and what an
error status from it means. The downloading itself, the resuming and the
checking are the same for every kind and live in download.py and cache.py.

    /models/qwen.gguf, file:///models/qwen.gguf   PathFetcher: used where it is, never copied
    http(s)://host/path/model.gguf                 HttpFetcher
    hf:org/repo/path/file.gguf[@revision]          HfFetcher: Hugging Face's resolve URL
    mirror:org/repo/commit/file.gguf               MirrorFetcher: a file the model mirror keeps

For a multi-file set the source is the set's base (a URL ending in a
directory, hf:org/repo[@revision], mirror:org/repo/commit) and each file's
name is joined onto it.
"""

from __future__ import annotations

import abc
import re
import ssl as ssl_module
from pathlib import Path
from urllib.parse import quote, unquote, urlsplit, urlunsplit

from llmgw.agent.weights.errors import NotLocal, WeightsError, redact
from llmgw.hub import SourceError, TokenFileError, bearer, parse_source


class Fetcher(abc.ABC):
    """One kind of source. Subclasses say how theirs is named and reached: the three abstract methods."""

    kind = ""
    local = False
    """A local source is used where it is; everything else is downloaded into the cache."""
    ssl: ssl_module.SSLContext | None = None
    """The context its addresses are dialed with; None is the system's authorities."""

    @abc.abstractmethod
    def claims(self, source: str) -> bool:
        """Whether `source` is written the way this kind is."""

    @abc.abstractmethod
    def cache_parts(self, source: str) -> list[str]:
        """Where a copy lives under the cache directory, as path components.

        Components come from the source, which the catalog's user wrote:
        cache.py refuses any that would step outside the cache directory.
        """

    @abc.abstractmethod
    def url(self, source: str, name: str = "") -> str:
        """The URL of the source's bytes, or of file `name` in the set it is the base of."""

    def headers(self) -> dict[str, str]:
        return {}

    def advice(self, status: int) -> str:
        """What to do about an error status, said after what happened."""
        if status in (401, 403):
            return "the server wants credentials this node does not have; give a URL the node may read"
        if status == 404:
            return "check the model's source: the server has no file there"
        if status == 416:
            return "the server refused to carry on a partial download; it will start again on the next try"
        if status >= 500:
            return "the server is in trouble; the node tries again when the shard is started again"
        return "check the model's source"


def _segments(path: str, source: str) -> list[str]:
    parts = [unquote(p) for p in path.split("/") if p]
    if not parts:
        raise WeightsError(f"{redact(source)} names no file: give the file's full address")
    return parts


class PathFetcher(Fetcher):
    """A file or directory already on the node, named by an absolute path."""

    kind = "path"
    local = True

    def claims(self, source: str) -> bool:
        return source.startswith(("/", "~", "file:"))

    def path(self, source: str) -> Path:
        if source.startswith("file:"):
            parts = urlsplit(source)
            if parts.netloc not in ("", "localhost"):
                raise WeightsError(f"{source} names a file on another machine ({parts.netloc}); "
                                   "give a path on this node, or an http(s):// address")
            source = unquote(parts.path)
        path = Path(source).expanduser()
        if not path.exists():
            raise NotLocal(
                f"the weights at {path} are not on this node: copy them there, or give the model a "
                "source the node can fetch (http(s)://, hf:org/repo/file, mirror:…)"
            )
        return path

    def cache_parts(self, source: str) -> list[str]:
        raise WeightsError(f"{source} is a path on the node, not a copy in the cache")

    def url(self, source: str, name: str = "") -> str:
        raise WeightsError(f"{source} is a path on the node, not fetched")


class HttpFetcher(Fetcher):
    """An http:// or https:// address, asked with GET and carried on with Range."""

    kind = "http"

    def claims(self, source: str) -> bool:
        return source.lower().startswith(("http://", "https://"))

    def cache_parts(self, source: str) -> list[str]:
        try:
            parts = urlsplit(source)
            host, port = parts.hostname, parts.port
        except ValueError as e:
            raise WeightsError(f"{redact(source)} is not an address the node can fetch: {e}") from None
        if not host:
            raise WeightsError(f"{redact(source)} names no host")
        # The query is not part of the name: a signed URL's changes at every
        # signing and the file it names does not.
        place = host if port is None else f"{host}_{port}"
        return [self.kind, place, *_segments(parts.path, source)]

    def url(self, source: str, name: str = "") -> str:
        if not name:
            return source
        parts = urlsplit(source)
        path = parts.path.rstrip("/") + "/" + quote(name, safe="/")
        return urlunsplit((parts.scheme, parts.netloc, path, parts.query, ""))


class HfFetcher(HttpFetcher):
    """`hf:org/repo/path/to/file[@revision]`, fetched from Hugging Face's resolve URL.

    The endpoint is configurable so that a test, or a site's own hub, stands
    in for huggingface.co. The token is read from its file at each fetch, so
    a token changed on disk is used without restarting the agent; it goes
    only to the endpoint (aiohttp drops it on the redirect to the CDN).
    """

    kind = "hf"

    def __init__(self, endpoint: str = "https://huggingface.co", token_file: str = ""):
        self.endpoint = endpoint.rstrip("/")
        self.token_file = token_file

    def claims(self, source: str) -> bool:
        return source.lower().startswith("hf:")

    def parse(self, source: str) -> tuple[str, str, str, str]:
        """(org, repo, file path, revision) of an hf: source; the file is "" for a set's base."""
        try:
            hf = parse_source(source)
        except SourceError as e:
            raise WeightsError(str(e)) from None
        return hf.org, hf.repo, hf.path, hf.revision

    def cache_parts(self, source: str) -> list[str]:
        org, repo, path, revision = self.parse(source)
        # A revision like refs/pr/1 is one component here, as it is in the URL.
        return ["hf", org, repo, revision.replace("/", "%2F"), *([unquote(p) for p in path.split("/") if p])]

    def url(self, source: str, name: str = "") -> str:
        org, repo, path, revision = self.parse(source)
        file = "/".join(p for p in (path, name) if p)
        if not file:
            raise WeightsError(f"{source} names no file: expected hf:org/repo/file[@revision]")
        return f"{self.endpoint}/{org}/{repo}/resolve/{quote(revision, safe='')}/{quote(file, safe='/')}"

    def headers(self) -> dict[str, str]:
        try:
            return bearer(self.token_file, "weights.hf_token_file")
        except TokenFileError as e:
            raise WeightsError(str(e)) from None

    def advice(self, status: int) -> str:
        if status in (401, 403):
            where = f"the token in {self.token_file}" if self.token_file else "no token"
            return (f"the repository is gated or private and Hugging Face refused {where}; accept its terms "
                    "on huggingface.co with the token's account, or give the node a token that may read it")
        if status == 404:
            return ("Hugging Face has no such file at that revision; "
                    "check the repository, the file's name and the revision")
        return super().advice(status)


class MirroredHfFetcher(HfFetcher):
    """An `hf:` source fetched from the cluster's model mirrors instead of Hugging Face: the same path (a mirror
    serves Hugging Face's resolve URLs for what it keeps), the same place in the cache, the node's certificate
    to dial with, and no Hugging Face token, which is the mirror's business. `urls` gives every mirror's address
    of a file, the first to try first."""

    kind = "hf"

    def __init__(self, mirrors: list[str], ssl: ssl_module.SSLContext | None):
        super().__init__(mirrors[0])
        self.mirrors = [m.rstrip("/") for m in mirrors]
        self.ssl = ssl

    def urls(self, source: str, name: str = "") -> list[str]:
        org, repo, path, revision = self.parse(source)
        return [_resolve(m, f"{org}/{repo}", revision, "/".join(p for p in (path, name) if p), source)
                for m in self.mirrors]

    def headers(self) -> dict[str, str]:
        return {}

    def advice(self, status: int) -> str:
        return _mirror_advice(status) or HttpFetcher.advice(self, status)


class MirrorFetcher(Fetcher):
    """`mirror:ORG/REPO/COMMIT/PATH`: a file the model mirror keeps, named as `llmgw mirror list` names it (a file
    added from an address is under url/HOST/…), fetched from the mirrors the StartShard names or agent.yaml's
    weights.mirror, over the cluster's TLS."""

    kind = "mirror"

    def __init__(self, base: str = "", ssl: ssl_module.SSLContext | None = None):
        self.mirrors = [base.rstrip("/")] if base else []
        self.ssl = ssl

    def at(self, mirrors: list[str], ssl: ssl_module.SSLContext | None) -> MirrorFetcher:
        fetcher = MirrorFetcher(ssl=ssl)
        fetcher.mirrors = [m.rstrip("/") for m in mirrors]
        return fetcher

    def claims(self, source: str) -> bool:
        return source.lower().startswith("mirror:")

    def _parts(self, source: str) -> tuple[str, str, str]:
        """(org/repo, commit, path) of the source; its path is "" for a set's base."""
        parts = source[len("mirror:"):].split("#", 1)[0].split("?", 1)[0].strip("/").split("/", 3)
        if len(parts) < 3 or not all(parts[:3]):
            raise WeightsError(f"{source} is not mirror:ORG/REPO/COMMIT/PATH, the name `llmgw mirror list` gives a "
                               "file")
        return f"{parts[0]}/{parts[1]}", parts[2], parts[3] if len(parts) == 4 else ""

    def cache_parts(self, source: str) -> list[str]:
        repo, commit, path = self._parts(source)
        return ["mirror", *repo.split("/"), commit, *_segments(path, source)]

    def urls(self, source: str, name: str = "") -> list[str]:
        if not self.mirrors:
            raise WeightsError(
                f"{source} is on the model mirror, and this node has no mirror address; set the cluster's "
                "mirror.url (llmgw ctl config set mirror.url https://HOST:8600), or weights.mirror in agent.yaml"
            )
        repo, commit, path = self._parts(source)
        return [_resolve(m, repo, commit, "/".join(p for p in (path, name) if p), source) for m in self.mirrors]

    def url(self, source: str, name: str = "") -> str:
        return self.urls(source, name)[0]

    def advice(self, status: int) -> str:
        return _mirror_advice(status) or super().advice(status)


def _resolve(mirror: str, repo: str, revision: str, file: str, source: str) -> str:
    if not file:
        raise WeightsError(f"{source} names no file")
    return f"{mirror}/{repo}/resolve/{quote(revision, safe='')}/{quote(file, safe='/')}"


def _mirror_advice(status: int) -> str:
    if status == 404:
        return ("the mirror does not keep it: a model added to the catalog is fetched into the mirror by itself "
                "(`llmgw mirror list` says how far it has got); `llmgw mirror add` fetches any other")
    if status in (401, 403):
        return "the mirror refused this node's certificate; join the node again (llmgw join CODE)"
    return ""


_HUB_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]*/[A-Za-z0-9][A-Za-z0-9._-]*$")


def is_hub_id(source: str) -> bool:
    """A bare Hugging Face model id (Qwen/Qwen2.5-7B-Instruct): the engine (vLLM, SGLang) downloads it itself."""
    return bool(_HUB_ID.match(source))
