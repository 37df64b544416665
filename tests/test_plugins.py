"""The plugin loader: built-ins always, a site's plugins from installed metadata, a broken one left out, said."""

from __future__ import annotations

import logging

import pytest

from llmgw import plugins
from llmgw.config.agent import WeightsSettings
from tests.fixtures.plugindist import WORDGUARD, install_plugin


def nothing_installed(group):
    return []


def test_the_built_ins_are_there_without_any_installed_metadata():
    # As under the zipapp, which carries llmgw's sources and no llmgw .dist-info.
    found = plugins.load(entry_points=nothing_installed)
    assert [(p.group, p.distribution) for p in found.found] == [(g, "llmgw") for g in plugins.GROUPS]
    assert "email" in found.provided(plugins.DETECTORS) and "injection" in found.provided(plugins.DETECTORS)
    assert set(found.provided(plugins.SCORERS)) == {"session", "latency", "queue", "kv", "prefix"}
    assert "llamacpp" in found.provided(plugins.ENGINES) and "sim" in found.provided(plugins.ENGINES)
    assert found.provided(plugins.WEIGHT_SOURCES) == ["path", "http", "hf", "mirror"]
    assert found.objects(plugins.DETECTORS, builtin=False) == [] and found.failed() == []


def test_an_installed_plugins_detector_is_loaded_with_its_distribution_and_version(tmp_path, monkeypatch):
    install_plugin(tmp_path, "wordguard", {"wordguard.py": WORDGUARD},
                   {plugins.DETECTORS: {"zorblax": "wordguard:Zorblax"}}, version="1.2.3")
    monkeypatch.syspath_prepend(str(tmp_path))
    found = plugins.load([plugins.DETECTORS])
    [theirs] = [p for p in found.found if not p.builtin]
    assert (theirs.name, theirs.distribution, theirs.version, theirs.provides, theirs.loaded) == (
        "zorblax", "wordguard", "1.2.3", ("zorblax",), True)
    [detector] = found.objects(plugins.DETECTORS, builtin=False)
    assert [m.value for m in detector.find("say ZORBLAX twice: zorblax")] == ["ZORBLAX", "zorblax"]


def test_a_plugin_that_raises_on_import_is_left_out_with_one_warning_naming_it(tmp_path, monkeypatch, caplog):
    install_plugin(tmp_path, "broken-guard", {"brokenguard.py": "raise RuntimeError('no licence file')\n"},
                   {plugins.DETECTORS: {"broken": "brokenguard:Detector"}})
    monkeypatch.syspath_prepend(str(tmp_path))
    with caplog.at_level(logging.WARNING, logger="llmgw.plugins"):
        found = plugins.load([plugins.DETECTORS])
    [failed] = found.failed()
    assert failed.error == "raised RuntimeError: no licence file"
    [warning] = [r.getMessage() for r in caplog.records]
    assert warning.startswith("the detector plugin broken (broken-guard 0.1.0, brokenguard:Detector) raised "
                              "RuntimeError: no licence file; it is left out")
    assert "email" in found.provided(plugins.DETECTORS)


def test_a_plugin_that_takes_a_built_ins_kind_is_refused_not_put_in_its_place(tmp_path, monkeypatch):
    install_plugin(tmp_path, "my-email", {"myemail.py": "class Email:\n    kind = 'email'\n"
                                                        "    def find(self, text):\n        return []\n"},
                   {plugins.DETECTORS: {"email": "myemail:Email"}})
    monkeypatch.syspath_prepend(str(tmp_path))
    found = plugins.load([plugins.DETECTORS])
    [failed] = found.failed()
    assert failed.error == ("gives a detector with the kind 'email', which is taken; a plugin adds detectors, "
                            "it does not replace one")
    assert [type(d).__name__ for d in found.objects(plugins.DETECTORS) if d.kind == "email"] == ["EmailDetector"]


def test_a_plugin_that_gives_something_else_is_refused_saying_what_it_should_have(tmp_path, monkeypatch):
    install_plugin(tmp_path, "half-engine", {"halfengine.py": "class Half:\n    name = 'half'\n"},
                   {plugins.ENGINES: {"half": "halfengine:Half"}})
    monkeypatch.syspath_prepend(str(tmp_path))
    [failed] = plugins.load([plugins.ENGINES]).failed()
    assert failed.error.endswith("which is not an engine: an engine has a name (text), needs_weights, validate(), "
                                 "command(), installed()")


def test_a_weight_source_plugin_is_given_the_agents_weights_settings(tmp_path, monkeypatch):
    source = ("class Bucket:\n    kind = 's3'\n    def __init__(self, settings):\n"
              "        self.mirror = settings.mirror\n"
              "    def claims(self, source):\n        return source.startswith('s3:')\n"
              "    def cache_parts(self, source):\n        return ['s3', source[3:]]\n"
              "    def url(self, source, name=''):\n        return 'http://bucket.example/' + source[3:]\n")
    install_plugin(tmp_path, "s3-weights", {"s3weights.py": source},
                   {plugins.WEIGHT_SOURCES: {"s3": "s3weights:Bucket"}})
    monkeypatch.syspath_prepend(str(tmp_path))
    found = plugins.load([plugins.WEIGHT_SOURCES],
                         args={plugins.WEIGHT_SOURCES: (WeightsSettings(mirror="http://10.0.0.9:8600"),)})
    kinds = [f.kind for f in found.objects(plugins.WEIGHT_SOURCES)]
    assert kinds == ["path", "http", "hf", "mirror", "s3"]  # llmgw's first: a plugin claims only what they do not
    assert found.objects(plugins.WEIGHT_SOURCES)[-1].mirror == "http://10.0.0.9:8600"
    assert found.objects(plugins.WEIGHT_SOURCES)[2].endpoint == "https://huggingface.co"


@pytest.mark.parametrize("value", ["llmgw.guard.default_detectors:shipped", "llmgw.guard.default_detectors: shipped"])
def test_llmgws_own_metadata_does_not_load_the_built_ins_twice(value):
    class Point:
        name, dist = "llmgw", None

        def __init__(self):
            self.value = value

    found = plugins.load([plugins.DETECTORS], entry_points=lambda group: [Point()])
    assert len(found.found) == 1 and found.failed() == []
