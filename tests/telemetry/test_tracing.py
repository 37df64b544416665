"""A program's traces, sent to a real OTLP/HTTP receiver on loopback: what reaches a collector, and when none does."""

from __future__ import annotations

import pytest

from llmgw.config import ConfigError, load_agent_config, load_server_config
from llmgw.config.telemetry import TelemetrySettings
from llmgw.telemetry import Tracing, end, parent_from, traceparent_of
from tests.support.otlp import OtlpReceiver

CLIENT_TRACE = "0af7651916cd43dd8448eb211c80319c"
SAMPLED = f"00-{CLIENT_TRACE}-b7ad6b7169203331-01"
SAMPLED_OUT = f"00-{CLIENT_TRACE}-b7ad6b7169203331-00"


@pytest.fixture(scope="module")
def receiver():
    r = OtlpReceiver()
    yield r
    r.close()


def sampled(headers: dict[str, str]) -> bool:
    """The sampled bit of a traceparent's flags (the next bit says whether the trace id is random)."""
    return bool(int(headers["traceparent"].rsplit("-", 1)[1], 16) & 1)


def tracing_to(receiver: OtlpReceiver, ratio: float = 1.0, service: str = "llmgw-test") -> Tracing:
    tracing = Tracing(service, "machine-1", "9.9")
    tracing.apply(TelemetrySettings(otlp_endpoint=receiver.url, sample_ratio=ratio))
    return tracing


def test_with_no_endpoint_there_is_no_tracer_and_no_span_is_made():
    tracing = Tracing("llmgw-test")
    tracing.apply(TelemetrySettings(otlp_endpoint="", sample_ratio=1.0))
    assert tracing.tracer is None
    assert tracing.start("anything") is None


def test_a_span_reaches_the_collector_with_the_programs_name_once_the_program_stops(receiver):
    tracing = tracing_to(receiver, service="llmgw-stopping")
    span = tracing.start("one step", attributes={"llmgw.model": "qwen"})
    end(span)
    tracing.shutdown()  # flushes: nothing is waited for beyond it
    got = [s for s in receiver.received() if s.service == "llmgw-stopping"]
    assert [(s.name, s.attributes["llmgw.model"]) for s in got] == [("one step", "qwen")]
    assert tracing.tracer is None


def test_at_ratio_0_only_what_a_caller_sampled_is_traced_in_the_callers_trace(receiver):
    tracing = tracing_to(receiver, ratio=0.0, service="llmgw-ratio0")
    own = tracing.start("a root of our own")
    assert own is not None and not own.is_recording()
    assert not sampled(traceparent_of(own))  # whoever it reaches is told it was not kept
    end(own)
    kept = tracing.start("asked for", parent_from({"traceparent": SAMPLED}))
    dropped = tracing.start("sampled out", parent_from({"traceparent": SAMPLED_OUT}))
    assert kept is not None and kept.is_recording()
    assert dropped is not None and not dropped.is_recording()
    # The decision travels on: what this sends an engine says sampled, or not.
    assert sampled(traceparent_of(kept)) and not sampled(traceparent_of(dropped))
    end(kept)
    end(dropped)
    tracing.shutdown()
    got = [s for s in receiver.received() if s.service == "llmgw-ratio0"]
    assert [(s.name, s.trace_id, s.parent_span_id) for s in got] == [("asked for", CLIENT_TRACE, "b7ad6b7169203331")]


def test_a_malformed_or_empty_traceparent_is_no_trace():
    assert parent_from({}) is None
    assert parent_from({"traceparent": "not a trace"}) is None
    assert parent_from({"traceparent": f"00-{'0' * 32}-b7ad6b7169203331-01"}) is None


def test_changed_settings_send_to_the_new_collector_and_the_old_provider_sends_what_it_held(receiver):
    second = OtlpReceiver()
    try:
        tracing = tracing_to(receiver, service="llmgw-moving")
        end(tracing.start("before"))
        tracing.apply(TelemetrySettings(otlp_endpoint=second.url + "/v1/traces", sample_ratio=1.0))
        end(tracing.start("after"))
        tracing.shutdown()
        receiver.wait_for(lambda spans: [s for s in spans if s.name == "before"], what="the span made before")
        assert [s.name for s in second.received()] == ["after"]
        assert "after" not in [s.name for s in receiver.received()]
    finally:
        second.close()


@pytest.mark.parametrize("telemetry, said", [
    ({"sample_ratio": 1.5}, "telemetry.sample_ratio: must be from 0 to 1, the share of requests traced "
                            "(0.1 is one in ten), got 1.5"),
    ({"sample_ratio": "all"}, 'telemetry.sample_ratio: expected a number, got "all"'),
    ({"otlp_endpoint": "collector:4318"}, 'telemetry.otlp_endpoint: expected an OTLP/HTTP collector\'s URL like '
                                          'http://127.0.0.1:4318, or nothing to trace nothing, got "collector:4318"'),
    ({"otlp_endpoint": "ftp://collector"}, "telemetry.otlp_endpoint: expected an OTLP/HTTP collector's URL"),
    ({"otlp_endpoint": "https://me:s3cret@otel.example.com"}, "telemetry.otlp_endpoint: holds a user name or "
                                                               "password; the settings are no place for a secret"),
    ({"endpoint": "http://collector:4318"}, "telemetry.endpoint: unknown key; did you mean telemetry.otlp_endpoint?"),
])
def test_bad_telemetry_settings_are_refused_with_a_sentence_naming_the_key(tmp_path, telemetry, said):
    import yaml

    for load, name in ((load_server_config, "server.yaml"), (load_agent_config, "agent.yaml")):
        path = tmp_path / name
        path.write_text(yaml.safe_dump({"telemetry": telemetry}))
        with pytest.raises(ConfigError) as refused:
            load(str(path))
        assert said in str(refused.value), str(refused.value)


def test_good_telemetry_settings_are_read_and_the_default_path_is_added(tmp_path):
    path = tmp_path / "agent.yaml"
    path.write_text("telemetry:\n  otlp_endpoint: http://10.0.0.9:4318\n  sample_ratio: 0.25\n")
    telemetry = load_agent_config(str(path)).telemetry
    assert (telemetry.traces_url, telemetry.sample_ratio) == ("http://10.0.0.9:4318/v1/traces", 0.25)
    assert TelemetrySettings("https://otel.example.com/ingest/traces").traces_url == \
        "https://otel.example.com/ingest/traces"


def test_at_ratio_1_what_a_caller_sampled_out_stays_out(receiver):
    """A node tracing everything of its own still leaves out a start its control plane sampled out."""
    tracing = tracing_to(receiver, ratio=1.0, service="llmgw-ratio1")
    dropped = tracing.start("sampled out upstream", parent_from({"traceparent": SAMPLED_OUT}))
    own = tracing.start("a root of our own")
    assert dropped is not None and not dropped.is_recording()
    assert own is not None and own.is_recording()
    end(dropped)
    end(own)
    tracing.shutdown()
    assert [s.name for s in receiver.received() if s.service == "llmgw-ratio1"] == ["a root of our own"]
