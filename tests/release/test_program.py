"""A pyz is checked before any machine runs it: what it is, what it was built for, that it starts."""

from __future__ import annotations

import hashlib
import io
import json
import tarfile
import zipfile

import pytest

from llmgw import __version__
from llmgw.release import (
    ReleaseError,
    Releases,
    check_program,
    install_program,
    open_bundle,
    previous_of,
    restore_previous,
    running_program,
)
from tests.support.pyz import (
    pyz,  # noqa: F401 - the fixture
    rewrite,
)
from tests.support.pyz import with_version as _with_version


def with_version(pyz, dest, version):
    return _with_version(pyz, version, dest)


def rewritten(pyz, dest, changes: dict[str, bytes]):
    """A copy of `pyz` with some entries replaced: a pyz damaged or built elsewhere."""
    return rewrite(pyz, dest, changes)


def built_for(pyz, dest, **changes):
    with zipfile.ZipFile(pyz) as zf:
        doc = json.loads(zf.read("pyz-built-for.json"))
    return rewritten(pyz, dest, {"pyz-built-for.json": json.dumps({**doc, **changes}).encode()})


@pytest.mark.slow  # builds llmgw.pyz (a minute) when its content changed
def test_a_built_program_is_taken_with_its_version_and_sha256(pyz):
    checked = check_program(pyz)
    assert checked.version == __version__
    assert checked.sha256 == hashlib.sha256(pyz.read_bytes()).hexdigest()


@pytest.mark.slow  # builds llmgw.pyz (a minute) when its content changed
def test_a_copy_with_another_version_says_that_version(pyz, tmp_path):
    assert check_program(with_version(pyz, tmp_path / "v2.pyz", "0.9.2")).version == "0.9.2"


@pytest.mark.slow  # builds llmgw.pyz (a minute) when its content changed
def test_a_program_built_for_another_architecture_is_refused_before_it_is_run(pyz, tmp_path):
    other = built_for(pyz, tmp_path / "arm.pyz", machine="riscv64")
    with pytest.raises(ReleaseError, match=r"built for Linux riscv64 .* build it on a machine like these"):
        check_program(other)


@pytest.mark.slow  # builds llmgw.pyz (a minute) when its content changed
def test_a_program_for_another_python_is_refused_naming_the_build_that_fits(pyz, tmp_path):
    other = built_for(pyz, tmp_path / "old.pyz", pythons=["3.99"])
    with pytest.raises(ReleaseError, match=r"carries llmgw for CPython 3\.99.*build\.py dist --python"):
        check_program(other)


def test_a_file_that_is_not_a_program_is_refused_in_one_sentence(tmp_path):
    text = tmp_path / "notes.txt"
    text.write_text("not a pyz")
    with pytest.raises(ReleaseError, match=r"is not an llmgw\.pyz \(not a zip archive\)"):
        check_program(text)
    with pytest.raises(ReleaseError, match=r"there is no file .*missing\.pyz"):
        check_program(tmp_path / "missing.pyz")


@pytest.mark.slow  # builds llmgw.pyz (a minute) when its content changed
def test_a_program_that_does_not_start_is_refused_saying_what_it_said(pyz, tmp_path):
    broken = rewritten(pyz, tmp_path / "broken.pyz", {"__main__.py": b"raise SystemExit('cannot start')\n"})
    with pytest.raises(ReleaseError, match=r"does not start here .*exited 1 saying 'cannot start'"):
        check_program(broken)


@pytest.mark.slow  # builds llmgw.pyz (a minute) when its content changed
def test_a_held_release_is_found_by_its_version(pyz, tmp_path):
    releases = Releases(tmp_path / "releases")
    held = releases.hold(check_program(with_version(pyz, tmp_path / "v2.pyz", "0.9.2")))
    assert held.path == tmp_path / "releases" / "0.9.2" / "llmgw.pyz"
    assert releases.versions() == ["0.9.2"] and releases.find("0.9.2") == held.path
    assert releases.sha256("0.9.2") == held.sha256 and releases.find("0.9.3") is None


@pytest.mark.slow  # builds llmgw.pyz (a minute) when its content changed
def test_a_program_is_replaced_whole_and_the_previous_one_kept_beside_it(pyz, tmp_path):
    target = tmp_path / "bin" / "llmgw"
    target.parent.mkdir()
    target.write_bytes(pyz.read_bytes())
    new = check_program(with_version(pyz, tmp_path / "v2.pyz", "0.9.2"))
    install_program(target, new.path, new.sha256)
    assert check_program(target).version == "0.9.2"
    assert check_program(previous_of(target)).version == __version__
    assert restore_previous(target)
    assert check_program(target).version == __version__


@pytest.mark.slow  # builds llmgw.pyz (a minute) when its content changed
def test_a_fetched_program_that_does_not_match_its_sha256_replaces_nothing(pyz, tmp_path):
    target = tmp_path / "llmgw"
    target.write_bytes(pyz.read_bytes())
    with pytest.raises(ReleaseError, match="does not match its sha256"):
        install_program(target, with_version(pyz, tmp_path / "v2.pyz", "0.9.2"), "0" * 64)
    assert check_program(target).version == __version__ and not previous_of(target).exists()


def test_a_process_not_started_from_a_program_refuses_to_replace_itself(monkeypatch):
    monkeypatch.delenv("LLMGW_PYZ", raising=False)
    with pytest.raises(ReleaseError, match=r"not started from an llmgw\.pyz"):
        running_program()


def _bundle(path, files: dict[str, bytes], sums: dict[str, str] | None = None, wheels=()):
    manifest = json.dumps({"version": "0.9.2", "wheels": list(wheels)}).encode()
    digests = sums or {name: hashlib.sha256(data).hexdigest() for name, data in files.items()}
    listing = "".join(f"{digest}  {name}\n" for name, digest in digests.items()).encode()
    with tarfile.open(path, "w") as tar:
        for name, data in {**files, "bundle.json": manifest, "SHA256SUMS": listing}.items():
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    return path


@pytest.mark.slow  # builds llmgw.pyz (a minute) when its content changed
def test_a_bundle_gives_its_program_and_wheels_each_checked(pyz, tmp_path):
    files = {"llmgw.pyz": pyz.read_bytes(), "wheels/xllamacpp-1-py3-none-any.whl": b"wheel"}
    bundle = open_bundle(_bundle(tmp_path / "b.tar", files, wheels=["xllamacpp-1-py3-none-any.whl"]),
                         tmp_path / "out")
    assert bundle.version == "0.9.2" and check_program(bundle.program).version == __version__
    assert [w.name for w in bundle.wheels] == ["xllamacpp-1-py3-none-any.whl"]


@pytest.mark.slow  # builds llmgw.pyz (a minute) when its content changed
def test_a_damaged_bundle_is_refused_naming_the_file_that_does_not_match(pyz, tmp_path):
    files = {"llmgw.pyz": pyz.read_bytes()}
    damaged = _bundle(tmp_path / "b.tar", files, sums={"llmgw.pyz": "0" * 64})
    with pytest.raises(ReleaseError, match=r"llmgw\.pyz in .* does not match its sha256 in SHA256SUMS"):
        open_bundle(damaged, tmp_path / "out")


def test_a_bundle_holding_a_path_outside_itself_is_refused_before_anything_is_written(tmp_path):
    hostile = _bundle(tmp_path / "b.tar", {"../escape": b"x"})
    with pytest.raises(ReleaseError, match=r"holds '\.\./escape', which no llmgw bundle holds"):
        open_bundle(hostile, tmp_path / "out")
    assert not (tmp_path / "escape").exists() and not (tmp_path / "out").exists()


def test_held_wheels_and_uploads_under_way_are_not_taken_for_versions(tmp_path):
    releases = Releases(tmp_path / "releases")
    wheel = tmp_path / "xllamacpp-1-py3-none-any.whl"
    wheel.write_bytes(b"wheel")
    digest = releases.hold_wheel(wheel, wheel.name)
    (releases.directory / ".upload-abc").write_bytes(b"half")
    (releases.directory / ".incoming-wheels").mkdir()
    assert releases.versions() == []
    assert releases.wheels() == {wheel.name: digest} and releases.wheel(wheel.name) is not None
    with pytest.raises(ReleaseError, match="is not a wheel's file name"):
        releases.hold_wheel(wheel, "../escape.whl")
