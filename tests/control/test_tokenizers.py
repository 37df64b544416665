"""Each Hugging Face model's tokenizer kept on the control plane, for routing by cache, from the pinned commit."""

from __future__ import annotations

import asyncio
import hashlib

import pytest

from llmgw.control.catalog import ModelSpec
from llmgw.control.catalog.spec import Origin, OriginFile
from llmgw.control.routes import tokenizer_of
from llmgw.control.tokenizers import TokenizerKeeper, hub_folder
from llmgw.hub import Hub as HubClient
from llmgw.router.prompttokens import PromptTokens
from tests.fixtures.tinyllama import write_tiny_llama
from tests.support.hfhub import Hub


def pinned(repo, name: str = "tiny") -> ModelSpec:
    """The model as the control plane pins it: each file's size, and the sha256 of the ones kept in LFS."""
    commit = repo.resolve("main")
    files = {path: OriginFile(size=blob.size, sha256=blob.sha256 or "") for path, blob in commit.files.items()}
    return ModelSpec(name, source=f"hf:{repo.id}", origin=Origin(repo=repo.id, commit=commit.sha,
                                                                       files=files))


@pytest.fixture
async def hub(tmp_path):
    write_tiny_llama(tmp_path / "tiny")
    served = Hub()
    served.repo("acme/tiny", files={name: (tmp_path / "tiny" / name).read_bytes()
                                     for name in ("config.json", "tokenizer.json", "tokenizer_config.json")})
    await served.start()
    yield served
    await served.stop()


async def test_a_models_tokenizer_is_fetched_from_its_pinned_commit_and_the_router_reads_it(hub, tmp_path):
    spec = pinned(hub.repos["acme/tiny"])
    keeper = TokenizerKeeper(tmp_path / "tokenizers", store=None, hub=lambda: HubClient(hub.url))
    folder = hub_folder(keeper.root, spec)
    assert folder == tmp_path / "tokenizers" / "acme/tiny" / spec.origin.commit

    await keeper.fetch(spec, folder)

    for name in ("tokenizer.json", "tokenizer_config.json"):
        assert (folder / name).read_bytes() == (tmp_path / "tiny" / name).read_bytes()
    assert tokenizer_of(spec, keeper.root) == str(folder)
    assert PromptTokens(folder).text("The sun is shining")
    # A model that names its own folder keeps it; one with no tokenizer on the hub has none kept.
    assert tokenizer_of(ModelSpec("own", tokenizer="/srv/tok", origin=spec.origin), keeper.root) == "/srv/tok"
    assert hub_folder(keeper.root, ModelSpec("gguf", origin=Origin(repo="acme/g", commit="c" * 40))) is None


async def test_a_tokenizer_that_does_not_match_what_was_pinned_is_not_kept(hub, tmp_path):
    spec = pinned(hub.repos["acme/tiny"])
    described = spec.origin.files["tokenizer_config.json"]
    spec.origin.files["tokenizer_config.json"] = OriginFile(size=described.size,
                                                            sha256=hashlib.sha256(b"other").hexdigest())
    keeper = TokenizerKeeper(tmp_path / "tokenizers", store=None, hub=lambda: HubClient(hub.url))
    folder = hub_folder(keeper.root, spec)

    with pytest.raises(ValueError, match="does not match the sha256"):
        await keeper.fetch(spec, folder)
    assert not folder.exists() or not any(folder.iterdir())


async def test_a_store_that_does_not_answer_is_said_once_in_a_sentence_not_a_stack(tmp_path, caplog):
    from llmgw.store import StoreUnavailable

    class Down:
        asked = 0

        async def list_models(self):
            Down.asked += 1
            raise StoreUnavailable("the store at postgresql://db/llmgw refused the connection")

    keeper = TokenizerKeeper(tmp_path / "tokenizers", store=Down(), hub=lambda: None, every=0.01)
    keeper.start()
    try:
        while Down.asked < 3:
            await asyncio.sleep(0.01)
    finally:
        await keeper.stop()
    said = [r for r in caplog.records if r.name == "llmgw.tokenizers"]
    assert [r.getMessage() for r in said] == [
        "tokenizers: the store did not answer (the store at postgresql://db/llmgw refused the connection); "
        "looking again every 0 s"]
    assert not any(r.exc_info for r in said)
