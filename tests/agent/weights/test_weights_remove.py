"""RemoveWeights: only what no model uses, only inside the cache."""

from __future__ import annotations

import hashlib
from pathlib import Path

BODY = b"weights" * 10_000


async def test_remove_deletes_what_no_model_uses_and_keeps_what_one_does(weights, origin, cache_dir):
    origin.files["/old.gguf"] = BODY
    origin.files["/used.gguf"] = BODY
    old, used = origin.url + "/old.gguf", origin.url + "/used.gguf"
    old_path = Path(await weights.fetch(old, sha256=hashlib.sha256(BODY).hexdigest()))
    used_path = Path(await weights.fetch(used))

    removed = await weights.remove([old, used], in_use=[used])

    assert removed.removed == [old]
    assert removed.freed_bytes >= len(BODY)
    assert removed.left == {used: "a model on this node still uses it"}
    assert not old_path.exists() and not old_path.with_name(".old.gguf.sha256").exists()
    assert used_path.read_bytes() == BODY


async def test_remove_deletes_a_set_and_the_parts_of_a_cut_download(weights, origin, cache_dir):
    origin.files["/m/v/a.safetensors"] = BODY
    directory = Path(await weights.fetch(origin.url + "/m/v/", files={"a.safetensors": ""}))
    part = Path(weights.cached_path(origin.url + "/half.gguf"))
    part = part.with_name(".half.gguf.part")
    part.write_bytes(b"x" * 100)

    removed = await weights.remove([origin.url + "/m/v/", origin.url + "/half.gguf"], in_use=[])

    assert removed.removed == [origin.url + "/m/v/", origin.url + "/half.gguf"]
    assert removed.freed_bytes == len(BODY) + 100
    assert not directory.exists() and not part.exists()
    assert list(cache_dir.iterdir()) == []  # the empty directories it made, too


async def test_remove_leaves_local_paths_and_anything_outside_the_cache(weights, origin, tmp_path):
    model = tmp_path / "m.gguf"
    model.write_bytes(BODY)

    removed = await weights.remove([str(model), origin.url + "/../../etc/passwd", "Qwen/Qwen3-8B"], in_use=[])

    assert removed.removed == [] and removed.freed_bytes == 0
    assert set(removed.left) == {str(model), origin.url + "/../../etc/passwd", "Qwen/Qwen3-8B"}
    assert model.exists()


async def test_remove_of_what_is_not_cached_frees_nothing(weights, origin):
    removed = await weights.remove([origin.url + "/never.gguf"], in_use=[])

    assert removed.freed_bytes == 0
    assert removed.left == {origin.url + "/never.gguf": "nothing of it is in the cache"}
