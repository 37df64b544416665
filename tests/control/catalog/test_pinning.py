"""A model from Hugging Face pinned where it is added, against a hub that speaks Hugging Face's API.

The hub is tests/support/hfhub.py, which the public huggingface_hub client is tested against
(tests/support/test_hfhub.py); the catalog is over a real store, both dialects.
"""

from __future__ import annotations

import hashlib

import pytest
from cluster_helpers import NOW

from llmgw.account.service import Actor
from llmgw.config import HubSettings
from llmgw.control.catalog.changes import Refusal
from llmgw.control.catalog.service import Catalog
from llmgw.store import AuditEntry
from tests.support.hfhub import Hub, gguf_bytes
from tests.support.pgcluster import free_port

ALICE = Actor("alice", "cli")
WEIGHTS = gguf_bytes()
OTHER = gguf_bytes(parameters=4096)


def sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


@pytest.fixture
async def hub():
    hub = await Hub().start()
    yield hub
    await hub.stop()


@pytest.fixture
def settings(hub):
    return {"hub": HubSettings(endpoint=hub.url)}


@pytest.fixture
def catalog(store, settings):
    async def audit(actor, action, target, before, after):
        await store.add_audit(AuditEntry(NOW, actor.name, actor.via, action, target, before, after))

    return Catalog(store, audit, clock=lambda: NOW, hub=lambda: settings["hub"])


async def serve(catalog, source, **choices):
    return await catalog.serve(ALICE, source, engine="llamacpp", memory="1GB", cores=1, **choices)


async def test_a_model_added_from_hugging_face_is_pinned_to_the_commit_with_its_files_sha256(catalog, hub, store):
    repo = hub.repo("Qwen/Tiny-GGUF", files={"tiny.gguf": WEIGHTS, "README.md": b"# tiny\n"})
    added = await serve(catalog, "hf:Qwen/Tiny-GGUF/tiny.gguf")
    spec = added["model"]["spec"]
    assert spec["source"] == f"hf:Qwen/Tiny-GGUF/tiny.gguf@{repo.main}"
    assert spec["sha256"] == sha(WEIGHTS)
    origin = spec["origin"]
    assert (origin["repo"], origin["revision"], origin["commit"], origin["hub"]) == \
        ("Qwen/Tiny-GGUF", "main", repo.main, hub.url)
    assert origin["files"] == {"tiny.gguf": {"size": len(WEIGHTS), "sha256": sha(WEIGHTS), "scan": "safe"}}
    assert (origin["publisher"], origin["trusted"], origin["trusted_by"]) == ("Qwen", "publisher", "")
    assert added["notes"][-1].startswith(f"pinned to commit {repo.main[:12]} of Qwen/Tiny-GGUF (main now)")
    (entry,) = await store.list_audit()
    assert entry.action == "model.serve" and entry.after["origin"]["commit"] == repo.main


async def test_a_push_upstream_moves_nothing_until_update_is_applied_which_is_audited(catalog, hub, store):
    repo = hub.repo("Qwen/Tiny-GGUF", files={"tiny.gguf": WEIGHTS})
    first = repo.main
    await serve(catalog, "hf:Qwen/Tiny-GGUF/tiny.gguf")
    pushed = hub.replace("Qwen/Tiny-GGUF", "tiny.gguf", OTHER)

    shown = await catalog.show("tiny")
    assert shown["spec"]["source"].endswith(f"@{first}") and shown["spec"]["sha256"] == sha(WEIGHTS)
    looked = await catalog.update(ALICE, "tiny")
    assert (looked["commit"], looked["upstream"], looked["applied"]) == (first, pushed, False)
    assert looked["files"] == [{"name": "tiny.gguf", "was": sha(WEIGHTS), "now": sha(OTHER), "size": len(OTHER)}]
    assert (await catalog.show("tiny"))["spec"]["source"].endswith(f"@{first}")

    moved = await catalog.update(ALICE, "tiny", apply=True)
    assert moved["applied"] and moved["model"]["spec"]["source"].endswith(f"@{pushed}")
    assert moved["model"]["spec"]["sha256"] == sha(OTHER)
    assert moved["model"]["spec"]["origin"]["revision"] == "main"
    (entry,) = [e for e in await store.list_audit() if e.action == "model.update"]
    assert (entry.action, entry.before["origin"]["commit"], entry.after["origin"]["commit"]) == \
        ("model.update", first, pushed)
    again = await catalog.update(ALICE, "tiny")
    assert again["upstream"] == again["commit"] == pushed and again["files"] == []


async def test_a_revision_given_as_a_commit_stays_that_commit(catalog, hub):
    repo = hub.repo("Qwen/Tiny-GGUF", files={"tiny.gguf": WEIGHTS})
    first = repo.main
    hub.replace("Qwen/Tiny-GGUF", "tiny.gguf", OTHER)
    added = await serve(catalog, f"hf:Qwen/Tiny-GGUF/tiny.gguf@{first}")
    spec = added["model"]["spec"]
    assert spec["source"].endswith(f"@{first}") and spec["sha256"] == sha(WEIGHTS)
    assert spec["origin"]["revision"] == first
    assert (await catalog.update(ALICE, "tiny"))["upstream"] == first


async def test_a_publisher_not_trusted_is_refused_unless_an_administrator_says_so_who_is_kept(catalog, hub, store):
    hub.repo("someone/Tiny-GGUF", files={"tiny.gguf": WEIGHTS})
    with pytest.raises(Refusal) as refused:
        await serve(catalog, "hf:someone/Tiny-GGUF/tiny.gguf")
    assert refused.value.status == 403
    assert str(refused.value).startswith("someone is not among the publishers this cluster trusts (Qwen, meta-llama")
    assert "--trust" in str(refused.value)
    assert hub.count() == 0  # refused before anything was asked of the hub

    added = await serve(catalog, "hf:someone/Tiny-GGUF/tiny.gguf", trust=True)
    origin = added["model"]["spec"]["origin"]
    assert (origin["trusted"], origin["trusted_by"]) == ("administrator", "alice")
    assert any("taken on alice's word (--trust)" in note for note in added["notes"])
    (entry,) = await store.list_audit()
    assert entry.after["origin"]["trusted_by"] == "alice"


async def test_the_trusted_publishers_are_the_settings_own_compared_without_case(catalog, hub, settings):
    hub.repo("my-company/Tiny-GGUF", files={"tiny.gguf": WEIGHTS})
    settings["hub"] = HubSettings(endpoint=hub.url, trusted_publishers=["My-Company"])
    added = await serve(catalog, "hf:my-company/Tiny-GGUF/tiny.gguf")
    assert added["model"]["spec"]["origin"]["trusted"] == "publisher"


async def test_a_file_hugging_faces_scan_marks_unsafe_is_refused_naming_it(catalog, hub):
    hub.repo("Qwen/Bad-GGUF", files={"bad.gguf": WEIGHTS}, security={"bad.gguf": "unsafe"})
    with pytest.raises(Refusal) as refused:
        await serve(catalog, "hf:Qwen/Bad-GGUF/bad.gguf")
    assert refused.value.status == 403
    assert str(refused.value).startswith("Hugging Face's scan marks bad.gguf unsafe")
    assert await catalog.list_models() == []


async def test_a_sha256_given_that_is_not_the_published_one_is_refused_naming_both(catalog, hub):
    repo = hub.repo("Qwen/Tiny-GGUF", files={"tiny.gguf": WEIGHTS})
    with pytest.raises(Refusal) as refused:
        await serve(catalog, "hf:Qwen/Tiny-GGUF/tiny.gguf", sha256=sha(OTHER))
    assert refused.value.status == 409
    assert sha(OTHER) in str(refused.value) and sha(WEIGHTS) in str(refused.value)
    assert repo.main in str(refused.value)
    added = await serve(catalog, "hf:Qwen/Tiny-GGUF/tiny.gguf", sha256=sha(WEIGHTS))
    assert added["model"]["spec"]["sha256"] == sha(WEIGHTS)


async def test_what_the_hub_lacks_is_refused_with_what_it_has(catalog, hub):
    hub.repo("Qwen/Tiny-GGUF", files={"tiny.gguf": WEIGHTS})
    cases = [("hf:Qwen/Nothing-GGUF/tiny.gguf", 404, "has no model repository Qwen/Nothing-GGUF"),
             ("hf:Qwen/Tiny-GGUF/tiny.gguf@v9", 404, "Qwen/Tiny-GGUF has no revision v9"),
             ("hf:Qwen/Tiny-GGUF/huge.gguf", 404, "Qwen/Tiny-GGUF has no file huge.gguf at main")]
    for source, status, said in cases:
        with pytest.raises(Refusal) as refused:
            await serve(catalog, source)
        assert (refused.value.status, said in str(refused.value)) == (status, True), str(refused.value)
    with pytest.raises(Refusal) as refused:
        await serve(catalog, "hf:Qwen/Tiny-GGUF/huge.gguf")
    assert "its files: .gitattributes, tiny.gguf" in str(refused.value)


async def test_a_hub_that_cannot_be_reached_is_named_with_the_setting_to_change(catalog, settings):
    closed = f"http://127.0.0.1:{free_port()}"
    settings["hub"] = HubSettings(endpoint=closed)
    with pytest.raises(Refusal) as refused:
        await serve(catalog, "hf:Qwen/Tiny-GGUF/tiny.gguf")
    assert refused.value.status == 502
    assert str(refused.value).startswith(f"could not reach Hugging Face at {closed}")
    assert "hub.endpoint" in str(refused.value)


async def test_a_private_repository_is_read_with_the_token_in_the_settings_file(catalog, hub, settings, tmp_path):
    hub.repo("meta-llama/Private-GGUF", files={"p.gguf": WEIGHTS}, private=True)
    with pytest.raises(Refusal) as refused:
        await serve(catalog, "hf:meta-llama/Private-GGUF/p.gguf")
    # The Hub answers a private repository as one it does not have, to a caller that may not read it.
    assert refused.value.status == 404 and "set hub.token_file" in str(refused.value)
    token = tmp_path / "hf-token"
    token.write_text(hub.token() + "\n")
    settings["hub"] = HubSettings(endpoint=hub.url, token_file=str(token))
    added = await serve(catalog, "hf:meta-llama/Private-GGUF/p.gguf")
    assert added["model"]["spec"]["sha256"] == sha(WEIGHTS)


async def test_a_gated_repository_is_pinned_without_a_token_its_listing_being_public(catalog, hub):
    # Only its files are gated: the node that fetches them needs the token (agent.yaml weights.hf_token_file).
    hub.repo("meta-llama/Gated-GGUF", files={"g.gguf": WEIGHTS}, gated="manual")
    added = await serve(catalog, "hf:meta-llama/Gated-GGUF/g.gguf")
    assert added["model"]["spec"]["sha256"] == sha(WEIGHTS)


async def test_a_set_of_files_is_pinned_each_file_checked_against_its_published_sum(catalog, hub):
    files = {"model-00001-of-00002.gguf": WEIGHTS, "model-00002-of-00002.gguf": OTHER}
    repo = hub.repo("Qwen/Split-GGUF", files=files)
    doc = {"name": "split", "source": "hf:Qwen/Split-GGUF", "files": {n: sha(d) for n, d in files.items()},
           "profiles": [{"engine": "llamacpp", "cpu_cores": 1, "memory": "1GB"}]}
    added = await catalog.add(ALICE, doc)
    spec = added["model"]["spec"]
    assert spec["source"] == f"hf:Qwen/Split-GGUF@{repo.main}"
    assert set(spec["origin"]["files"]) == set(files)
    with pytest.raises(Refusal) as refused:
        await catalog.add(ALICE, {**doc, "name": "split-2",
                                  "files": {**doc["files"], "model-00002-of-00002.gguf": sha(WEIGHTS)}})
    assert refused.value.status == 409 and "model-00002-of-00002.gguf's sha256" in str(refused.value)


async def test_a_model_from_anywhere_else_is_kept_as_written_with_no_origin(catalog, hub):
    added = await serve(catalog, "/models/tiny.gguf")
    assert added["model"]["spec"]["source"] == "/models/tiny.gguf"
    assert "origin" not in added["model"]["spec"]
    with pytest.raises(Refusal) as refused:
        await catalog.update(ALICE, "tiny")
    assert refused.value.status == 409 and "was not pinned from Hugging Face" in str(refused.value)
    assert hub.count() == 0


async def test_a_repository_listed_over_several_pages_is_read_to_its_last_file(catalog, hub):
    # The hub pages an expanded tree at 50 entries: the weights here are on the third page.
    files = {f"notes/{i:03d}.md": b"x" for i in range(120)}
    repo = hub.repo("Qwen/Many-Files", files={**files, "zz-tiny.gguf": WEIGHTS})
    added = await serve(catalog, "hf:Qwen/Many-Files/zz-tiny.gguf")
    assert added["model"]["spec"]["sha256"] == sha(WEIGHTS)
    assert hub.count("tree") >= 3 and added["model"]["spec"]["source"].endswith(repo.main)
