"""The admin token file names its holder: the audit log's "who" for whatever the token does."""

from __future__ import annotations

import pytest

from llmgw.control.token import TokenError, ensure_token, read_admin_token, read_token


def test_a_new_token_is_held_by_whom_init_named_and_read_back_so(tmp_path):
    path = str(tmp_path / "admin-token")
    made = ensure_token(path, "ada@example.com")
    assert read_admin_token(path) == made and made.holder == "ada@example.com"
    assert read_token(path) == made.secret == open(path).read().strip()  # one line, as $(cat admin-token) sends
    assert made.secret.startswith("ada@example.com~")
    assert ensure_token(path, "someone-else").holder == "ada@example.com"  # an existing token keeps its holder


def test_a_token_file_of_one_line_from_an_older_llmgw_is_held_by_admin(tmp_path):
    path = tmp_path / "admin-token"
    path.write_text("x" * 43 + "\n")
    path.chmod(0o600)
    assert read_admin_token(str(path)).holder == "admin"


def test_a_holder_that_could_pass_for_another_entry_is_refused_with_what_is_allowed(tmp_path):
    with pytest.raises(TokenError, match="up to 64 letters, digits and ._@\\+-"):
        ensure_token(str(tmp_path / "admin-token"), "ada (claimed: root)")
    assert not (tmp_path / "admin-token").exists()
