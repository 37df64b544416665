from dataclasses import dataclass, field
from typing import Literal

import pytest

from llmgw.config.loader import ConfigError, from_dict, get_path, load_file, set_path, to_dict, unset_path
from llmgw.config.server import ServerConfig
from llmgw.config.types import Duration, Size


@dataclass(frozen=True)
class Item:
    name: str
    """n"""
    weight: float = 1.0
    """w"""


@dataclass(frozen=True)
class Inner:
    ttl: Duration = Duration("5s")
    """t"""
    tags: dict[str, int] = field(default_factory=dict)
    """g"""


@dataclass(frozen=True)
class Doc:
    inner: Inner = field(default_factory=Inner)
    """i"""
    items: list[Item] = field(default_factory=list)
    """x"""
    on: bool = False
    """o"""
    mode: Literal["text", "json"] = "text"
    """m"""
    note: str | None = None
    """n"""


def refused(cls, data) -> str:
    with pytest.raises(ConfigError) as err:
        from_dict(cls, data)
    return str(err.value)


def test_a_typod_key_is_refused_naming_its_path_and_the_nearest_key():
    assert refused(ServerConfig, {"router": {"cahce": {}}}) == "router.cahce: unknown key; did you mean router.cache?"


def test_an_unknown_key_with_nothing_near_lists_the_keys_there():
    assert refused(Doc, {"inner": {"zzz": 1}}) == "inner.zzz: unknown key; the keys under inner are ttl, tags"


def test_a_wrong_size_names_the_path_and_the_expected_form():
    message = refused(ServerConfig, {"router": {"cache": {"max_bytes": "lots"}}})
    assert message == 'router.cache.max_bytes: expected a size like 256MB, got "lots"'


def test_a_wrong_value_in_a_list_item_names_the_item():
    data = {"items": [{"name": "a"}, {"name": "b"}, {"name": "c", "weight": "heavy"}]}
    assert refused(Doc, data) == 'items[2].weight: expected a number, got "heavy"'


def test_a_missing_required_key_is_named():
    assert refused(Doc, {"items": [{"weight": 2}]}) == "items[0].name: required, and not set"


def test_only_true_and_false_are_booleans():
    assert refused(Doc, {"on": "yes"}) == 'on: expected true or false, got "yes"'
    assert refused(Doc, {"on": 1}) == "on: expected true or false, got 1"
    assert from_dict(Doc, {"on": True}).on is True


def test_a_choice_outside_the_list_is_refused_with_the_choices():
    assert refused(Doc, {"mode": "xml"}) == 'mode: expected one of text|json, got "xml"'


def test_a_number_where_text_is_expected_is_refused_with_how_to_quote_it():
    assert refused(Doc, {"note": 1.5}) == 'note: expected text, got 1.5; put it in quotes if you mean the text: "1.5"'


def test_an_optional_key_takes_null():
    assert from_dict(Doc, {"note": None}).note is None
    assert from_dict(Doc, {"note": "hi"}).note == "hi"


def test_a_mapping_of_values_is_checked_key_by_key():
    assert from_dict(Doc, {"inner": {"tags": {"a": 1}}}).inner.tags == {"a": 1}
    assert refused(Doc, {"inner": {"tags": {"a": "one"}}}) == 'inner.tags.a: expected a whole number, got "one"'


def test_an_empty_block_takes_its_defaults():
    assert from_dict(ServerConfig, {"router": None, "models": None}) == ServerConfig()


def test_a_document_round_trips_through_plain_values():
    cfg = from_dict(ServerConfig, {
        "control": {"lease_ttl": "15s", "settings_poll": "1500ms"},
        "auth": {"max_key_ttl": "90d"},
        "router": {"cache": {"max_bytes": "1GiB"}, "trusted_proxies": ["10.0.0.0/8"]},
        "models": [{"name": "qwen-7b", "endpoints": ["http://10.0.0.7:8000/v1"]}],
        "listen": {"metrics": "off"},
    })
    plain = to_dict(cfg)
    assert plain["router"]["cache"]["max_bytes"] == "1GB"
    assert plain["control"]["settings_poll"] == "1s500ms"
    assert plain["listen"]["metrics"] == "off"
    assert from_dict(ServerConfig, plain) == cfg


def write(tmp_path, text, name="server.yaml"):
    path = tmp_path / name
    path.write_text(text)
    return str(path)


def test_a_file_error_is_prefixed_with_the_file_as_given(tmp_path):
    path = write(tmp_path, "router:\n  cache:\n    max_bytes: lots\n")
    with pytest.raises(ConfigError) as err:
        load_file(ServerConfig, path)
    assert str(err.value) == f'{path}: router.cache.max_bytes: expected a size like 256MB, got "lots"'


def test_a_yaml_syntax_error_names_the_line_and_column(tmp_path):
    path = write(tmp_path, "log:\n  level: info\n  format: [text\nname: x\n")
    with pytest.raises(ConfigError) as err:
        load_file(ServerConfig, path)
    assert str(err.value).startswith(f"{path}: line 4, column 5: ")
    assert "\n" not in str(err.value)


def test_a_key_given_twice_is_refused_naming_both_lines(tmp_path):
    path = write(tmp_path, "log:\n  level: info\nname: a\nlog:\n  level: debug\n")
    with pytest.raises(ConfigError) as err:
        load_file(ServerConfig, path)
    assert str(err.value) == f"{path}: line 4, column 1: log is given twice in the same mapping (first on line 1)"


def test_a_missing_file_says_so(tmp_path):
    with pytest.raises(ConfigError) as err:
        load_file(ServerConfig, "nowhere/server.yaml")
    assert str(err.value) == "nowhere/server.yaml: no such file"


def test_an_empty_file_gives_every_default(tmp_path):
    assert load_file(ServerConfig, write(tmp_path, "")) == ServerConfig()
    assert load_file(ServerConfig, write(tmp_path, "# nothing set yet\n")) == ServerConfig()


def test_a_file_that_is_a_list_at_the_top_is_refused_with_what_was_expected(tmp_path):
    path = write(tmp_path, "- name: x\n")
    with pytest.raises(ConfigError) as err:
        load_file(ServerConfig, path)
    assert str(err.value) == (
        f"{path}: expected keys at the top level (like `log:` with `level: info` under it), got a list")


def test_off_in_a_file_stays_the_word_off(tmp_path):
    cfg = load_file(ServerConfig, write(tmp_path, "listen:\n  metrics: off\n"))
    assert cfg.listen.metrics.off


def test_get_path_reads_nested_keys_and_list_items():
    cfg = from_dict(ServerConfig, {"models": [{"name": "a"}, {"name": "b", "owner": "acme"}]})
    assert get_path(cfg, "router.cache.max_bytes") == Size("256MB")
    assert get_path(cfg, "models[1].owner") == "acme"


def test_get_path_of_an_unknown_key_names_it():
    with pytest.raises(ConfigError) as err:
        get_path(ServerConfig(), "router.cache.max_byte")
    assert str(err.value) == "router.cache.max_byte: unknown key; did you mean router.cache.max_bytes?"


def test_set_path_parses_the_value_and_leaves_the_original_doc_unchanged():
    doc = {"router": {"cache": {"max_bytes": "256MB"}}}
    new = set_path(ServerConfig, doc, "router.cache.max_bytes", "512MB")
    assert new == {"router": {"cache": {"max_bytes": "512MB"}}}
    assert doc == {"router": {"cache": {"max_bytes": "256MB"}}}
    assert from_dict(ServerConfig, new).router.cache.max_bytes == Size("512MB")


def test_set_path_makes_the_blocks_it_needs():
    new = set_path(ServerConfig, {}, "auth.unknown_key_rate", "50")
    assert new == {"auth": {"unknown_key_rate": 50}}


def test_set_path_reads_lists_and_booleans_as_yaml():
    new = set_path(ServerConfig, None, "router.trusted_proxies", "[10.0.0.0/8, 192.168.1.1]")
    assert new["router"]["trusted_proxies"] == ["10.0.0.0/8", "192.168.1.1"]
    assert set_path(ServerConfig, None, "admin_allow_remote", "true") == {"admin_allow_remote": True}


def test_set_path_keeps_text_as_typed_for_a_text_key():
    new = set_path(ServerConfig, {"models": [{"name": "a"}]}, "models[0].owner", "007")
    assert new["models"][0]["owner"] == "007"


def test_set_path_refuses_a_bad_value_naming_the_path():
    doc = {"router": {"cache": {"max_bytes": "256MB"}}}
    with pytest.raises(ConfigError) as err:
        set_path(ServerConfig, doc, "router.cache.max_bytes", "lots")
    assert str(err.value) == 'router.cache.max_bytes: expected a size like 256MB, got "lots"'
    assert doc == {"router": {"cache": {"max_bytes": "256MB"}}}


def test_set_path_refuses_a_value_the_whole_document_does_not_allow():
    doc = {"router": {"cache": {"max_bytes": "1MB"}}}
    with pytest.raises(ConfigError) as err:
        set_path(ServerConfig, doc, "router.cache.max_entry_bytes", "2MB")
    assert str(err.value).startswith("router.cache.max_entry_bytes: 2MB is more than max_bytes (1MB)")


def test_an_embedding_budget_of_nothing_is_refused_saying_what_it_would_do():
    with pytest.raises(ConfigError) as err:
        set_path(ServerConfig, {}, "router.cache.embedding_budget", "0s")
    assert str(err.value).startswith("router.cache.embedding_budget: 0s would never wait for the embedding model")


def test_an_embedding_budget_is_taken_as_a_span():
    doc = set_path(ServerConfig, {}, "router.cache.embedding_budget", "10s")
    assert doc == {"router": {"cache": {"embedding_budget": "10s"}}}


def test_set_path_refuses_a_typod_key_with_the_nearest_one():
    with pytest.raises(ConfigError) as err:
        set_path(ServerConfig, {}, "router.cahce.max_bytes", "1GB")
    assert str(err.value) == "router.cahce: unknown key; did you mean router.cache?"


def test_unset_path_puts_a_key_back_to_its_default_and_drops_empty_blocks():
    doc = {"router": {"cache": {"max_bytes": "512MB"}}, "name": "cp1"}
    new = unset_path(ServerConfig, doc, "router.cache.max_bytes")
    assert new == {"name": "cp1"}
    assert doc == {"router": {"cache": {"max_bytes": "512MB"}}, "name": "cp1"}
    assert from_dict(ServerConfig, new).router.cache.max_bytes == Size("256MB")


def test_unset_path_of_a_key_not_set_changes_nothing():
    assert unset_path(ServerConfig, {"name": "cp1"}, "auth.cache_ttl") == {"name": "cp1"}


def test_unset_path_of_an_unknown_key_names_it():
    with pytest.raises(ConfigError, match=r"^auth\.cache_tll: unknown key; did you mean auth\.cache_ttl\?$"):
        unset_path(ServerConfig, {}, "auth.cache_tll")
