"""Which checkout's var/ a command run inside it means (llmgw/checkout.py)."""

from __future__ import annotations

from llmgw.checkout import checkout_file, find_var


def test_the_nearest_var_with_a_servers_or_a_nodes_file_is_the_checkouts(tmp_path):
    (tmp_path / "var").mkdir()
    (tmp_path / "var" / "admin-token").write_text("t")
    inner = tmp_path / "vendor" / "other"
    (inner / "var" / "node").mkdir(parents=True)
    (inner / "var" / "node" / "agent.yaml").write_text("{}")
    (inner / "src" / "deep").mkdir(parents=True)
    (tmp_path / "docs").mkdir()
    assert find_var(tmp_path / "docs") == tmp_path / "var"
    assert find_var(inner / "src" / "deep") == inner / "var"
    # The nearest checkout has no admin token: not the outer one's, which is another server.
    assert checkout_file("admin-token", inner / "src" / "deep") is None
    assert checkout_file("admin-token", tmp_path / "docs") == str(tmp_path / "var" / "admin-token")


def test_a_var_folder_holding_neither_is_not_a_checkout(tmp_path):
    # /var on the way to / is the system's: a var/ is a checkout's only by what build.py run puts in it.
    (tmp_path / "var" / "lib").mkdir(parents=True)
    assert find_var(tmp_path / "var" / "lib") != tmp_path / "var"
