"""What the control plane asks Hugging Face (or a site's own hub speaking its API): a repository at a revision.

Two reads, as the public `huggingface_hub` client makes them:

    GET /api/models/{org}/{repo}/revision/{revision}             the commit the revision is now, gated, private
    GET /api/models/{org}/{repo}/tree/{commit}?recursive=true&expand=true
                                                                  every file: size, the sha256 Hugging Face
                                                                  publishes for an LFS file, its scan

The tree is read at the commit, not at the revision, so a push between the two reads cannot mix two commits'
files. It comes in pages (a `Link: <…>; rel="next"` header), followed to the end.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import quote

import aiohttp
from yarl import URL

from llmgw.errors import ExpectedError
from llmgw.hub.source import is_commit
from llmgw.hub.token import TokenFileError, bearer

_NEXT = re.compile(r'<([^>]+)>;\s*rel="next"')
# A listing of more pages than this is not a model repository; stop rather than read without end.
_MOST_PAGES = 200


class HubError(ExpectedError):
    """Hugging Face could not say what was asked, in a sentence that says what to do; `status` is the HTTP status
    to answer an administrator with."""

    def __init__(self, message: str, status: int = 502):
        super().__init__(message)
        self.status = status


@dataclass(frozen=True)
class HubFile:
    path: str
    size: int
    sha256: str = ""
    """Published for a file kept in LFS (the weights); "" for a small file kept in git (config.json)."""
    scan: str = ""
    """Hugging Face's verdict on the file: safe, unsafe, suspicious, caution…; "" where it gave none."""


@dataclass(frozen=True)
class RepoInfo:
    repo_id: str
    commit: str
    files: dict[str, HubFile] = field(default_factory=dict)
    gated: bool = False
    private: bool = False
    author: str = ""


@dataclass(frozen=True)
class Found:
    """A repository as the hub's search lists it: its files' names, not yet their sizes."""

    repo_id: str
    commit: str
    files: tuple[str, ...] = ()
    tags: tuple[str, ...] = ()
    library: str = ""
    downloads: int = 0
    gated: bool = False


class Hub:
    """One hub's API at `endpoint`, with the token read from `token_file` at each call (changed on disk, used at
    once), sent only to the endpoint."""

    def __init__(self, endpoint: str = "https://huggingface.co", token_file: str = "", timeout: float = 30,
                 session: Callable[[], aiohttp.ClientSession] | None = None):
        self.endpoint = endpoint.rstrip("/")
        self.token_file = token_file
        self.timeout = timeout
        self._session = session

    def _headers(self) -> dict[str, str]:
        try:
            return bearer(self.token_file, "hub.token_file")
        except TokenFileError as e:
            raise HubError(str(e), 500) from None

    async def repo(self, repo_id: str, revision: str = "main") -> RepoInfo:
        """The repository at `revision` (a branch, a tag or a commit): the commit it is, and its files."""
        async with self._open() as session:
            info = await self._get(session, f"{self.endpoint}/api/models/{repo_id}/revision/"
                                            f"{quote(revision, safe='')}", repo_id, revision)
            if not isinstance(info, dict) or not isinstance(info.get("sha"), str):
                raise HubError(f"{self.endpoint} answered for {repo_id} without the commit (its sha): is it a "
                               "Hugging Face hub?")
            commit = info["sha"]
            if not is_commit(commit):
                raise HubError(f"{self.endpoint} answered for {repo_id} with {commit[:60]!r} as its commit, which is "
                               "not one (40 hexadecimal digits): is it a Hugging Face hub?")
            files: dict[str, HubFile] = {}
            url: str | None = f"{self.endpoint}/api/models/{repo_id}/tree/{commit}?recursive=true&expand=true"
            for _ in range(_MOST_PAGES):
                if url is None:
                    break
                page, url = await self._page(session, url, repo_id, commit)
                for entry in page:
                    if isinstance(entry, dict) and entry.get("type") == "file":
                        try:
                            files[str(entry["path"])] = _file(entry)
                        except (KeyError, TypeError, ValueError):
                            raise HubError(f"{self.endpoint}'s listing of {repo_id} has an entry llmgw cannot read "
                                           f"({str(entry)[:120]}): is it a Hugging Face hub?") from None
            else:
                raise HubError(f"{self.endpoint}'s listing of {repo_id} ran past {_MOST_PAGES} pages; "
                               "is it a model repository?")
        return RepoInfo(repo_id, commit, files, gated=bool(info.get("gated")), private=bool(info.get("private")),
                        author=str(info.get("author") or repo_id.split("/", 1)[0]))

    async def search(self, query: str, limit: int = 20) -> list[Found]:
        """Model repositories whose name holds `query`, the most downloaded first, as the hub's search gives them
        (`/api/models?search=…&full=true`): one page of at most `limit`."""
        url = (f"{self.endpoint}/api/models?search={quote(query, safe='')}&limit={limit}&full=true"
               "&sort=downloads&direction=-1")
        async with self._open() as session:
            page, _ = await self._page(session, url, f"the search for {query!r}", "main")
        found = []
        for entry in page[:limit]:
            if not isinstance(entry, dict) or not isinstance(entry.get("id"), str):
                continue
            listed, tagged = entry.get("siblings"), entry.get("tags")
            siblings: list[Any] = listed if isinstance(listed, list) else []
            tags: list[Any] = tagged if isinstance(tagged, list) else []
            found.append(Found(repo_id=entry["id"], commit=str(entry.get("sha") or ""),
                               files=tuple(str(s["rfilename"]) for s in siblings
                                           if isinstance(s, dict) and "rfilename" in s),
                               tags=tuple(str(t) for t in tags), library=str(entry.get("library_name") or ""),
                               downloads=entry["downloads"] if isinstance(entry.get("downloads"), int) else 0,
                               gated=bool(entry.get("gated"))))
        return found

    async def read(self, repo_id: str, commit: str, path: str, first: int) -> bytes:
        """The first `first` bytes of a file at a commit (a ranged read through resolve and its CDN), for what a
        file's header or a small config says before anything is fetched."""
        url = f"{self.endpoint}/{repo_id}/resolve/{commit}/{quote(path, safe='/')}"
        try:
            async with self._open() as session, \
                    session.get(url, headers={**self._headers(), "Range": f"bytes=0-{first - 1}"}) as r:
                if r.status not in (200, 206):
                    raise self._refusal(r.status, r.headers.get("X-Error-Code", ""), repo_id, commit)
                return await r.content.read(first)
        except (aiohttp.ClientError, TimeoutError) as e:
            raise HubError(f"could not read {path} of {repo_id} from {self.endpoint} ({e or type(e).__name__})",
                           502) from None

    def _open(self) -> aiohttp.ClientSession:
        if self._session is not None:
            return self._session()
        return aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=self.timeout))

    async def _get(self, session: aiohttp.ClientSession, url: str, repo_id: str, revision: str) -> Any:
        body, _ = await self._fetch(session, url, repo_id, revision)
        return body

    async def _page(self, session: aiohttp.ClientSession, url: str, repo_id: str,
                    revision: str) -> tuple[list[Any], str | None]:
        body, link = await self._fetch(session, url, repo_id, revision)
        if not isinstance(body, list):
            raise HubError(f"{self.endpoint}'s file listing of {repo_id} is not a list: is it a Hugging Face hub?")
        found = _NEXT.search(link)
        if not found:
            return body, None
        # The next page must be the hub's own: the token goes with every request, and a Link elsewhere would
        # take it there (or take the control plane to an address no one configured).
        following = found.group(1)
        if URL(following).origin() != URL(self.endpoint).origin():
            raise HubError(f"{self.endpoint}'s listing of {repo_id} continues at another address "
                           f"({URL(following).origin()}), which llmgw does not follow")
        return body, following

    async def _fetch(self, session: aiohttp.ClientSession, url: str, repo_id: str, revision: str) -> tuple[Any, str]:
        try:
            async with session.get(url, headers=self._headers(), allow_redirects=True) as r:
                if r.status != 200:
                    raise self._refusal(r.status, r.headers.get("X-Error-Code", ""), repo_id, revision)
                try:
                    return await r.json(content_type=None), r.headers.get("Link", "")
                except ValueError:
                    raise HubError(f"{self.endpoint} answered {url.split('?')[0]} with something that is not "
                                   "JSON: is it a Hugging Face hub?") from None
        except (aiohttp.ClientError, TimeoutError) as e:
            reason = "it did not answer in time" if isinstance(e, TimeoutError) else str(e) or type(e).__name__
            raise HubError(f"could not reach Hugging Face at {self.endpoint} ({reason}); set hub.endpoint to a "
                           "hub this control plane can reach (llmgw ctl config set)", 502) from None

    def _refusal(self, status: int, code: str, repo_id: str, revision: str) -> HubError:
        if code == "RevisionNotFound":
            return HubError(f"{repo_id} has no revision {revision} on {self.endpoint}: give a branch, tag or commit "
                            "it has", 404)
        if code == "RepoNotFound":
            # The Hub says this of a private repository too, to a caller whose token may not read it.
            token = "" if self.token_file else " (if it is private: set hub.token_file to a token that may read it)"
            return HubError(f"{self.endpoint} has no model repository {repo_id}: check the organisation and the "
                            f"name{token}", 404)
        if code == "GatedRepo" or status in (401, 403):
            where = f"the token in {self.token_file}" if self.token_file else "no token"
            return HubError(f"{repo_id} is gated or private and {self.endpoint} refused {where}; accept its terms with "
                            "the token's account, or set hub.token_file to a token that may read it", 403)
        if status == 404:
            return HubError(f"{self.endpoint} has no model repository {repo_id}: check the organisation and the "
                            "name", 404)
        return HubError(f"{self.endpoint} answered {status} for {repo_id}; try again, or check the hub's status")


def _file(entry: dict[str, Any]) -> HubFile:
    lfs = entry.get("lfs") if isinstance(entry.get("lfs"), dict) else None
    scan = entry.get("securityFileStatus") if isinstance(entry.get("securityFileStatus"), dict) else None
    return HubFile(path=str(entry["path"]), size=int(lfs["size"] if lfs else entry.get("size") or 0),
                   sha256=str(lfs["oid"]).lower() if lfs and lfs.get("oid") else "",
                   scan=str(scan.get("status") or "") if scan else "")
