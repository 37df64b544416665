"""An agent's plugins: an engine the node can then run, and a kind of weight source offered after llmgw's own."""

from __future__ import annotations

import json
import os
import subprocess
import sys

from tests.fixtures.plugindist import install_plugin

ENGINE = '''
from llmgw.engines import Launch


class Echo:
    name = "echo"
    needs_weights = False

    def validate(self, profile, *, model_path=None):
        pass

    def command(self, profile, *, model_path, port, host, api_key_file=None, binary=None, shard_id=""):
        return Launch(argv=["echo-server", "--port", str(port)], model=profile.model)

    def installed(self, binary=None):
        return "1.0"
'''

BUCKET = '''
class Bucket:
    kind = "s3"

    def __init__(self, settings):
        self.hf_endpoint = settings.hf_endpoint

    def claims(self, source):
        return source.startswith("s3:")

    def cache_parts(self, source):
        return ["s3", *source[3:].split("/")]

    def url(self, source, name=""):
        return "http://127.0.0.1:9/" + source[3:]
'''

# Run in a process of its own: the engine registry is the process's, and a test's plugin must not stay in it.
PROBE = '''
import json
from llmgw import engines
from llmgw.agent.agent import installed_engines
from llmgw.agent.plugins import load_agent_plugins
from llmgw.config.agent import AgentConfig, WeightsSettings

cfg = AgentConfig(weights=WeightsSettings(hf_endpoint="http://127.0.0.1:8700"))
found, fetchers = load_agent_plugins(cfg)
print(json.dumps({"engines": engines.names(), "installed": installed_engines(cfg).get("echo"),
                  "fetchers": [f.kind for f in fetchers], "hub": fetchers[-1].hf_endpoint,
                  "claimed_by": next(f.kind for f in fetchers if f.claims("s3:models/qwen.gguf"))}))
'''


def test_a_plugins_engine_and_weight_source_are_the_agents_after_loading(tmp_path):
    install_plugin(tmp_path, "echo-engine", {"echoengine.py": ENGINE, "bucket.py": BUCKET},
                   {"llmgw.engines": {"echo": "echoengine:Echo"}, "llmgw.weight_sources": {"s3": "bucket:Bucket"}})
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in (str(tmp_path), os.environ.get("PYTHONPATH")) if p)}
    done = subprocess.run([sys.executable, "-c", PROBE], capture_output=True, text=True, env=env, timeout=60)
    assert done.returncode == 0, done.stderr
    seen = json.loads(done.stdout)
    assert "echo" in seen["engines"] and "llamacpp" in seen["engines"]
    assert seen["installed"] == "1.0"
    assert seen["fetchers"] == ["path", "http", "hf", "mirror", "s3"]
    assert seen["hub"] == "http://127.0.0.1:8700" and seen["claimed_by"] == "s3"
