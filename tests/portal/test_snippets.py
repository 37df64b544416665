"""Each tool's snippet is code its tool reads, holding this gateway's address, the model and the key."""

from __future__ import annotations

import json
import shlex
import shutil
import subprocess
import tomllib

import yaml

from llmgw.portal.snippets import TOOLS, key_step, placeholder, tools

BASE = "https://llm.example.com:8443"
# Quotes, a backslash and markup: a model's name must reach each tool as it is.
MODEL = "llama-3 'q' \"x\" \\ <b>&"


def steps(key: str = "sk-llmgw-secret") -> dict[str, list]:
    return {t.id: list(t.steps) for t in tools(base=BASE + "/", model=MODEL, key=key)}


def code(tool: str, n: int = 0) -> str:
    return steps()[tool][n].code


def shell(tmp_path, text: str) -> None:
    script = tmp_path / "snippet.sh"
    script.write_text(text)
    subprocess.run(["bash", "-n", str(script)], check=True)


def test_every_tool_the_page_promises_has_steps():
    assert TOOLS == ("vscode", "python", "javascript", "curl", "continue", "codex", "cline", "claude")
    # VS Code's second step is what to do in VS Code itself: a sentence, with no code to copy.
    assert all(t and t[0].code for t in steps().values())
    assert all(s.code or s.language == "text" for t in steps().values() for s in t)


def test_the_python_snippet_compiles_and_names_the_v1_address_and_model():
    source = code("python")

    compile(source, "hello.py", "exec")
    assert f'base_url="{BASE}/v1"' in source
    assert 'os.environ["LLMGW_API_KEY"]' in source
    assert eval(source.split("model=")[1].split(",\n")[0]) == MODEL


def test_the_javascript_snippet_is_a_module_node_accepts(tmp_path):
    # Failed, never skipped, without node: a snippet nobody checked is what this test is against.
    assert shutil.which("node"), "node is not installed: apt-get install nodejs (`python3 build.py test` does, as root)"
    module = tmp_path / "hello.mjs"
    module.write_text(code("javascript"))

    subprocess.run(["node", "--check", str(module)], check=True)
    assert "process.env.LLMGW_API_KEY" in module.read_text()


def test_the_curl_snippet_is_shell_whose_body_is_json_naming_the_model(tmp_path):
    text = code("curl")

    shell(tmp_path, text)
    words = shlex.split(text.replace("\\\n", " "))
    assert words[1] == f"{BASE}/v1/chat/completions"
    assert json.loads(words[words.index("-d") + 1])["model"] == MODEL


def test_continue_gets_an_assistant_file_of_its_own_reading_the_key_from_its_env_file():
    (assistant, env) = steps()["continue"]

    parsed = yaml.safe_load(assistant.code)
    assert assistant.path == "~/.continue/assistants/llmgw.yaml"
    assert parsed["schema"] == "v1"
    (model,) = parsed["models"]
    assert model["provider"] == "openai" and model["model"] == MODEL and model["apiBase"] == f"{BASE}/v1"
    assert model["apiKey"] == "${{ secrets.LLMGW_API_KEY }}"
    assert env.path == "~/.continue/.env" and env.code == "LLMGW_API_KEY=sk-llmgw-secret\n"


def test_codex_gets_a_provider_in_its_config_toml_reading_the_key_from_the_environment():
    (step,) = steps()["codex"]

    parsed = tomllib.loads(step.code)
    assert step.path == "~/.codex/config.toml"
    assert parsed["model_provider"] == "llmgw" and parsed["model"] == MODEL
    assert parsed["model_providers"]["llmgw"] == {
        "name": "llmgw", "base_url": f"{BASE}/v1", "env_key": "LLMGW_API_KEY", "wire_api": "responses"}


def test_cline_gets_the_openai_compatible_fields_with_the_key():
    fields = dict(line.split(": ", 1) for line in code("cline").splitlines())

    assert fields == {"API Provider": "OpenAI Compatible", "Base URL": f"{BASE}/v1",
                      "API Key": "sk-llmgw-secret", "Model ID": MODEL}


def test_claude_code_gets_the_address_without_v1_and_the_key_as_its_auth_token(tmp_path):
    text = code("claude")

    shell(tmp_path, text)
    exports = dict(shlex.split(line)[1].split("=", 1) for line in text.splitlines() if line.startswith("export"))
    assert exports["ANTHROPIC_BASE_URL"] == BASE
    assert exports["ANTHROPIC_AUTH_TOKEN"] == "$LLMGW_API_KEY"
    assert exports["ANTHROPIC_MODEL"] == MODEL


def test_the_key_line_quotes_the_secret_for_the_shell(tmp_path):
    text = key_step("sk-llmgw-a'b").code

    shell(tmp_path, text)
    assert shlex.split(text) == ["export", "LLMGW_API_KEY=sk-llmgw-a'b"]


def test_a_key_whose_secret_is_not_known_is_shown_by_its_prefix():
    assert placeholder("sk-llmgw-ab12") == "sk-llmgw-ab12…"
    assert steps(placeholder("sk-llmgw-ab12"))["cline"][0].code.count("sk-llmgw-ab12…") == 1
