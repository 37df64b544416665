"""Reciprocal rank fusion: what both rankings hold rises, ties keep the first ranking's order."""

from llmgw.kb import fuse


def test_a_passage_in_both_rankings_beats_one_first_in_only_one():
    # c: 1/63 + 1/61; a: 1/61; b and d: 1/62 each, b first as the first ranking has it.
    assert [item for item, _ in fuse([["a", "b", "c"], ["c", "d"]])] == ["c", "a", "b", "d"]


def test_ties_keep_the_order_of_the_first_ranking_and_scores_fall():
    fused = fuse([["x", "y"], ["y", "x"]])
    assert [item for item, _ in fused] == ["x", "y"]
    assert fused[0][1] == fused[1][1]
    assert fuse([]) == []
