"""vLLM's KV-cache events read as vLLM writes them, followed into llmgw's own chain of block hashes."""

from __future__ import annotations

import pytest

from llmgw.engines.kvevents import BadBatch, Chains, Cleared, Removed, Stored, chain, decode_batch, encode_batch
from llmgw.router.prefixindex import PrefixIndex, prompt_blocks

# Encoded by vLLM 0.32's own KVEventBatch (msgspec) in its CPU build: blocks of 4 tokens; two blocks stored from
# the root (tokens 100-107), a third after the second (7-10), then that third evicted.
RECORDED = bytes.fromhex(
    "93cb41dac597daa000009388a474797065ab426c6f636b53746f726564ac626c6f636b5f68617368657392c42001010101010101010101"
    "01010101010101010101010101010101010101010101c4200202020202020202020202020202020202020202020202020202020202020202"
    "b1706172656e745f626c6f636b5f68617368c0a9746f6b656e5f696473986465666768696a6baa626c6f636b5f73697a6504a76c6f7261"
    "5f6964c0a66d656469756da3475055a96c6f72615f6e616d65c088a474797065ab426c6f636b53746f726564ac626c6f636b5f68617368"
    "657391c4200303030303030303030303030303030303030303030303030303030303030303b1706172656e745f626c6f636b5f68617368"
    "c4200202020202020202020202020202020202020202020202020202020202020202a9746f6b656e5f696473940708090aaa626c6f636b"
    "5f73697a6504a76c6f72615f6964c0a66d656469756da3475055a96c6f72615f6e616d65c083a474797065ac426c6f636b52656d6f7665"
    "64ac626c6f636b5f68617368657391c4200303030303030303030303030303030303030303030303030303030303030303a66d65646975"
    "6da3475055c0")


def test_a_batch_written_by_vllm_reads_as_its_stored_and_removed_blocks():
    ts, events = decode_batch(RECORDED)
    assert ts == 1796628330.5
    first, second, removed = events
    assert first == Stored((b"\x01" * 32, b"\x02" * 32), None, tuple(range(100, 108)), 4)
    assert second.parent == b"\x02" * 32 and second.tokens == (7, 8, 9, 10)
    assert removed == Removed((b"\x03" * 32,))


def test_what_sim_engine_writes_reads_back_the_same_and_older_vllm_arrays_read_too():
    events = [Stored((5, 6), None, (1, 2, 3, 4), 2), Removed((5,)), Cleared()]
    assert decode_batch(encode_batch(1.0, events)) == (1.0, events)
    import msgpack
    older = msgpack.packb([2.0, [["BlockStored", [9], None, [1, 2], 2, None], ["AllBlocksCleared"]], None])
    assert decode_batch(older) == (2.0, [Stored((9,), None, (1, 2), 2), Cleared()])


@pytest.mark.parametrize("payload", [b"\xc1", b"\x93\x01\x02\x03", b"\x92\x01\x91\x81\xa4type\xabBlockStored"])
def test_a_payload_that_is_not_a_batch_is_refused_with_a_reason(payload):
    with pytest.raises(BadBatch):
        decode_batch(payload)


def test_the_chains_name_each_block_by_its_tokens_and_every_block_before_it():
    chains = Chains()
    _, events = decode_batch(RECORDED)
    change = chains.apply(events)
    root_two = chain(list(range(100, 108)), 4)
    third = chain([7, 8, 9, 10], 4, parent=root_two[-1])
    # The third block was stored and evicted in the one batch: the leader is told of neither.
    assert change.added == root_two and change.removed == [] and change.block_size == 4
    # The router, hashing a prompt that starts with the same tokens, names the same blocks.
    assert prompt_blocks(list(range(100, 108)) + [1, 2], 4) == root_two
    # The same tokens after another beginning are another block.
    assert chain([7, 8, 9, 10], 4) != third


def test_a_block_whose_parent_was_never_seen_is_passed_over():
    chains = Chains()
    change = chains.apply([Stored((b"x",), b"unseen", (1, 2), 2)])
    assert not change and len(chains) == 0


def test_the_index_finds_each_replicas_longest_cached_prefix_and_forgets_evictions():
    index = PrefixIndex()
    system = list(range(1, 33))  # 8 blocks of 4
    blocks = prompt_blocks(system, 4)
    index.apply("r1", 4, blocks, [])
    index.apply("r2", 4, blocks[:3], [])
    assert index.matched(blocks) == {"r1": 8, "r2": 3}
    index.apply("r1", 4, [], blocks[5:])
    assert index.matched(blocks) == {"r1": 5, "r2": 3}
    index.apply("r1", 4, blocks[:1], [], cleared=True)
    assert index.matched(blocks) == {"r1": 1, "r2": 3}
    index.forget("r2")
    assert index.matched(blocks) == {"r1": 1} and index.shards() == ["r1"]
    assert index.matched(prompt_blocks([99] * 8, 4)) == {}
