"""`llmgw ctl config get PATH`: what the admin API answers for one key of the cluster's settings."""

from __future__ import annotations

from llmgw.config import ClusterSettings, from_dict, to_dict
from llmgw.control.settings import ClusterSettingsWatcher, seed_settings
from llmgw.store import open_store


async def _watcher_over(tmp_path, doc: dict) -> ClusterSettingsWatcher:
    store = await open_store(f"sqlite:{tmp_path / 'llmgw.db'}")
    await seed_settings(store, from_dict(ClusterSettings, doc), "test", "test")
    return ClusterSettingsWatcher(store)


async def test_a_key_that_is_not_set_reads_as_null_not_the_word_none(tmp_path):
    doc = to_dict(ClusterSettings())
    doc["models"] = [{"name": "m", "endpoints": ["http://127.0.0.1:9/v1"]}]
    watcher = await _watcher_over(tmp_path, doc)
    try:
        assert await watcher.get("models[0].external") == (1, None)
        # Durations and sizes still read as a person writes them, and plain numbers as numbers.
        assert await watcher.get("auth.cache_ttl") == (1, str(ClusterSettings().auth.cache_ttl))
        assert await watcher.get("models[0].context_length") == (1, 0)
    finally:
        await watcher.store.close()
