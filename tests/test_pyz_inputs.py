"""What the suite's llmgw.pyz is built from: the checkout as committed, not what a running llmgw is writing."""

from __future__ import annotations

import os

from tests.support.pyz import ROOT, _inputs_digest


def test_a_file_a_running_llmgw_is_writing_into_the_checkout_does_not_change_the_archive_it_is_built_from():
    # The portal compiles its catalogues into the checkout through llmgw.mo.partial: a worker listing the
    # checkout then reading each file found one gone (2026-12-07). Such a file is not among the inputs.
    before = _inputs_digest()
    partial = ROOT / "llmgw" / "portal" / f"test-{os.getpid()}.mo.partial"
    partial.write_bytes(b"half a catalogue")
    try:
        assert _inputs_digest() == before
    finally:
        partial.unlink()
