"""Arguments and variables a profile may not give an engine, however they are spelt.

A profile's `args` and `env` reach the engine as written, and a profile is
written by whoever may add a model — not by whoever runs the node. So what
loads code (a model repository's Python, a plugin, a library), moves where
the engine reads or writes (another model, a file of the node's, a
directory it fills), sends work or data elsewhere, or sets what the agent
sets itself (where it listens, its key, its cards, its sizes) is refused,
each with the sentence saying why.

Spellings. Python's argparse takes any unambiguous beginning of a long flag
for the flag (`--trust-remote` is `--trust-remote-code`) and `--flag=value`
for `--flag value`; vLLM also reads `_` for `-` (`--trust_remote_code`) and
`--json-flag.key value` for one key of a JSON flag; TensorRT-LLM spells its
flags with `_`. So a flag is compared with `_` and `-` made one, without
what follows `=` or `.`, and for the engines that parse with argparse a
beginning of a refused flag is refused too. llama.cpp takes no beginnings —
there `--chat-template` is a flag of its own, not `--chat-template-file` —
and short flags (`-m`, `-hf`) are matched as written.

Variables. Only the families engines are tuned with are taken (CUDA_,
NCCL_, VLLM_, OMP_, …), and within them none whose name says it is a path,
a directory, a cache, a plugin, a library, an address, a credential or a
way to trust remote code.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from llmgw.engines.base import ProfileError

# --- flags --------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Flag:
    """One flag an engine may not be given, in every spelling the engine has for it."""

    spellings: tuple[str, ...]
    why: str
    """Finishes "it …": what the flag does that a profile may not make the engine do."""
    when: Callable[[str], bool] | None = None
    """Refused only for a value this says yes to (a --chat-template that names a file, not one written out)."""

    @property
    def name(self) -> str:
        return self.spellings[0]


def refused(why: str, *spellings: str, when: Callable[[str], bool] | None = None) -> Flag:
    return Flag(spellings=spellings, why=why, when=when)


def set_by_agent(field_name: str, *spellings: str) -> Flag:
    """A flag the agent gives from one of the profile's own fields, so the placement sized by it holds."""
    return Flag(spellings=spellings, why=f"is given by the agent from the profile's {field_name}; set that instead")


# Reasons shared by several engines' lists, so the table in docs/engines.md reads the same for each.
RUNS_REPO_CODE = "runs the Python code a model's repository ships, as the engine's user"
LOADS_CODE = "imports Python code named by the profile into the engine"
LOADS_FILE = "loads a file of the node's, or another model, that the agent neither fetched nor checked"
DOWNLOADS = "downloads a model or file past the agent, which neither pins nor checks it"
WRITES_FILES = "writes files where the profile says, outside the engine's own directories"
READS_CONFIG = "reads a file of further flags, which these checks never see"
CREDENTIAL = "puts a credential on a command line every user on the node can read; the agent gives the engine its key"
LISTENS = "is where the engine listens, which the agent chooses and the router is told"
SENDS_ELSEWHERE = "sends requests, prompts or the model's work to another service or machine"
KV_EVENTS = ("publishes the engine's KV-cache events, which the agent sets to a loopback port it follows for the "
             "routers (docs/routing.md); elsewhere they would show what people's prompts held")
LOGS_PROMPTS = "writes every prompt and answer to the engine's output, which `llmgw ctl logs` shows"
MOVES_SOURCE = "names the model's weights, which the agent gives from the model's source"
MOVES_TOKENIZER = "reads the tokenizer from another repository or path than the model's"
SERVES_FILES = "lets requests read the node's local files"
PICKS_CARD = "chooses the card, which the agent pins from the profile's gpus (CUDA_VISIBLE_DEVICES); set those instead"
TLS_FILES = "reads a key or certificate file of the node's; the router reaches engines on the cluster's network"
LOAD_FORMAT = ("changes how the weights are read, some ways (pt, a pickle) running code; "
               "given a Hugging Face id the agent asks for safetensors")


def names_a_file(value: str) -> bool:
    """Whether a template-or-path value is a path rather than a template written out or a built-in's name.

    vLLM and SGLang read --chat-template as a file when one is there; a
    template written out has Jinja's braces, a built-in's name (chatml) has
    no slash.
    """
    v = value.strip()
    if "{" in v:
        return False
    return "/" in v or v.startswith(("~", ".")) or v.endswith((".jinja", ".j2", ".json", ".txt", ".tmpl"))


_NEGATIVE_NUMBER = re.compile(r"^-\d")


def _base(token: str) -> tuple[str, str | None, str]:
    """A flag's name as compared, its `=value` if any, and a vLLM dotted key ("" if none)."""
    name, eq, value = token.partition("=")
    key = ""
    if name.startswith("--"):
        name, _, key = name.partition(".")
        name = "--" + name[2:].replace("_", "-")
    return name, (value if eq else None), key


def _normal(spelling: str) -> str:
    return "--" + spelling[2:].replace("_", "-") if spelling.startswith("--") else spelling


def find(flags: Sequence[Flag], given: str, *, abbreviations: bool) -> list[tuple[Flag, str]]:
    """The refused flags `given` (already cut at = and .) may be read as, each with the spelling it is read as.

    An exact match is the flag, as argparse takes it; otherwise, for an
    engine that takes beginnings, every refused flag it begins.
    """
    exact = [(flag, s) for flag in flags for s in flag.spellings if _normal(s) == given]
    if exact or not abbreviations:
        return exact
    # argparse's own rule: a beginning of a long option, or of a short option
    # longer than one letter (-tp), is that option when it begins only it;
    # when it begins several argparse refuses it anyway, so refusing it here
    # loses nothing the engine would have run.
    return [(flag, s) for flag in flags for s in flag.spellings
            if _normal(s).startswith(given) and given.startswith("--") == s.startswith("--")]


def _readings(token: str) -> list[tuple[str, str | None, str, bool]]:
    """The ways an engine may read a token: (flag, value or None, dotted key, value attached to a short flag)."""
    readings = [(*_base(token), False)]
    # A one-letter short flag takes its value attached (-m/etc/x, -t8) in
    # argparse and in `llmgw llama-server`; a letter after it is most often
    # a flag of its own (-fa, -tb), so only a value that cannot begin one is
    # read that way.
    if not token.startswith("--") and len(token) > 2 and not token[2].isalpha() and token[2] not in "-=":
        readings.append((token[:2], token[2:], "", True))
    return readings


def check_args(engine: str, args: Sequence[str], flags: Sequence[Flag], *, abbreviations: bool,
               underscores: bool = False) -> None:
    """Refuse the first of a profile's arguments the engine may not be given, naming it and saying why.

    `abbreviations`: the engine takes a beginning of a long flag for it
    (argparse). `underscores`: it reads `_` as `-` (vLLM). Either way `_` and
    `-` are compared as one — refusing a spelling the engine would reject
    anyway costs nothing — but the refusal says what the engine reads a
    flag as only where it does.
    """
    for i, token in enumerate(args):
        if token == "--":  # noqa: S105 - a word of the command line, not a secret
            raise ProfileError(
                f"args[{i}]", f"{engine} may not be given a bare --: it ends the engine's options, and what "
                              "follows would reach it unchecked")
        if not token.startswith("-") or token == "-" or _NEGATIVE_NUMBER.match(token):  # noqa: S105 - a word
            continue
        for name, value, key, attached in _readings(token):
            for flag, spelling in find(flags, name, abbreviations=abbreviations):
                if flag.when is not None:
                    if value is None:
                        value = args[i + 1] if i + 1 < len(args) else None
                    if value is None or not flag.when(f"{key} {value}" if key else value):
                        continue
                written = token.split("=", 1)[0]
                # Say what the engine reads it as only where it does: a
                # beginning, an attached value, or vLLM's _ and .key forms.
                read = _normal(spelling) != name or attached or (underscores and written != name)
                read_as = f" ({engine} reads it as {spelling})" if read else ""
                raise ProfileError(f"args[{i}]", f"{engine} may not be given {written}{read_as}: it {flag.why}")


# --- variables ----------------------------------------------------------------------------------

FAMILIES = (
    "CUDA_", "NCCL_", "NVIDIA_", "NVTE_", "GLOO_", "UCX_", "TORCH_", "PYTORCH_",
    "VLLM_", "SGLANG_", "SGL_", "GGML_", "LLAMA_", "OMP_", "MKL_", "OPENBLAS_", "KMP_",
    "HF_", "TRANSFORMERS_", "TOKENIZERS_", "TRITON_", "FLASHINFER_",
    "TRTLLM_", "TLLM_", "FREETOKEN_", "STRATA_", "COMFYUI_",
)
"""The families of variables engines are tuned with; any other variable is refused."""

TAKEN = frozenset({"PYTHONUNBUFFERED", "PYTHONHASHSEED", "PYTHONIOENCODING", "TZ"})
"""Single variables outside the families that tune and do nothing else."""

_LIBRARY = "loads a library into the engine ahead of its own, which runs anything"
_PYTHON = "puts other Python code ahead of the engine's, or runs some at its start"
_PROXY = "sends the engine's downloads and calls through another machine"

NAMED = {
    "LD_PRELOAD": _LIBRARY,
    "LD_LIBRARY_PATH": _LIBRARY,
    "LD_AUDIT": _LIBRARY,
    "PYTHONPATH": _PYTHON,
    "PYTHONSTARTUP": _PYTHON,
    "PYTHONHOME": _PYTHON,
    "PYTHONUSERBASE": _PYTHON,
    "PYTHONINSPECT": _PYTHON,
    "PATH": "changes which programs the engine runs",
    "HOME": "moves where the engine reads and writes its settings and caches",
    "BASH_ENV": "runs a file's commands in every shell the engine starts",
    "HTTP_PROXY": _PROXY,
    "HTTPS_PROXY": _PROXY,
    "ALL_PROXY": _PROXY,
    "CUDA_VISIBLE_DEVICES": "is given by the agent from the profile's gpus; set those instead",
    "NVIDIA_VISIBLE_DEVICES": "is given by the agent from the profile's gpus; set those instead",
    "CUDA_DEVICE_ORDER": "changes which card an index names, so the shard would run on another shard's GPU",
    "VLLM_ALLOW_RUNTIME_LORA_UPDATING": "lets any request load an adapter from a path or repository it names",
    "VLLM_SERVER_DEV_MODE": "opens vLLM's development endpoints, which reset and reconfigure the engine",
    "FREETOKEN_MMPROJ": "loads a projector file the agent neither fetched nor checked",
}

# Words in a variable's name (split at _) that say it moves where the engine
# reads or writes, loads code, or carries a secret.
_WORDS = {
    "PATH": "names a path", "PATHS": "names paths", "DIR": "names a directory", "DIRS": "names directories",
    "HOME": "moves a home directory", "ROOT": "moves a directory", "CACHE": "moves a cache",
    "FILE": "names a file", "FILES": "names files", "CONFIG": "reads a configuration file",
    "PLUGIN": "loads a plugin", "PLUGINS": "loads plugins", "PRELOAD": "loads a library",
    "LIBRARY": "loads a library", "HOST": "is an address", "HOSTNAME": "is an address", "ADDR": "is an address",
    "ADDRESS": "is an address", "IP": "is an address", "PORT": "is an address", "URL": "is an address",
    "ENDPOINT": "is an address", "TRUST": "trusts a model repository's code", "INSECURE": "turns a safety off",
    "PICKLE": "reads pickles, which run code", "TOKEN": "is a credential", "KEY": "is a credential",
    "SECRET": "is a credential", "PASSWORD": "is a credential",
}

_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")


def env_refusal(name: str) -> str:
    """Why a profile may not set the variable `name`, or "" when it may."""
    if not _NAME.match(name):
        return "is not a variable's name (letters, digits and _, not starting with a digit)"
    key = name.upper()
    if key in NAMED:
        return NAMED[key]
    if key.startswith("LLAMA_ARG_"):
        return ("is a llama-server flag given through the environment, where the flag checks never see it; "
                "put it in args")
    if key not in TAKEN and not key.startswith(FAMILIES):
        return ("is not one of the variables engines are tuned with (" + ", ".join(f + "*" for f in FAMILIES)
                + ", " + ", ".join(sorted(TAKEN)) + ")")
    for word in key.split("_"):
        if word in _WORDS:
            return (f"{_WORDS[word]}, and a profile may not move where the engine reads or writes, load code into "
                    "it or hand it a secret")
    return ""


def check_env(engine: str, env: dict[str, str]) -> None:
    for name in env:
        why = env_refusal(name)
        if why:
            raise ProfileError(f"env[{name}]", f"{engine} may not be given {name}: it {why}")
        if "\x00" in env[name]:
            raise ProfileError(f"env[{name}]", "a variable's value cannot hold a NUL character")
