"""The embedders, implementations of the port `ports.memory.Embedder`: text to a dense vector for
recall by meaning.

The store records the embedder's `name` and `dimension` with its collection, so vectors from one
model are never compared with another's: a changed embedder is a clear error until the memories are
re-embedded (`market-analyst memories reindex`).

- `WordLlamaEmbedder` (the default): a 256-dimension static embedding model whose weights ship
  inside the `wordllama` wheel; runs offline, loads in well under a second, and is imported only
  when something is embedded.
- `OpenAIEmbedder`: an OpenAI-compatible embeddings endpoint through `langchain-openai`.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from market_analyst.ports.memory import Embedder as Embedder  # the port; the stores import it from here

WORDLLAMA_CONFIG = "l2_supercat"
WORDLLAMA_DIMENSION = 256


# The loaded models of this process, by dimension: a load parses the tokenizer and converts the
# weights (about 60 ms of CPU), and a process that opens the memory store again and again (a server)
# pays it once. A model is read-only once loaded (its tokenizer's settings are fixed at load), so
# threads share it.
_MODELS: dict[int, Any] = {}
_MODELS_LOCK = threading.Lock()


def _import_wordllama() -> Any:
    """The `wordllama` package, imported without what its import does to the process's logging: it
    calls `logging.basicConfig(level=INFO)`, which gave every process that had not set up logging
    first (the benchmarks, a host application) a root handler printing every library's INFO lines on
    stderr (the embedded PostgreSQL's whole start-up, each HTTP request)."""
    root = logging.getLogger()
    handlers, level = list(root.handlers), root.level
    import wordllama

    for handler in root.handlers[:]:
        if handler not in handlers:
            root.removeHandler(handler)
    root.setLevel(level)
    return wordllama


def load_wordllama(dimension: int = WORDLLAMA_DIMENSION) -> Any:
    """WordLlama's bundled model at `dimension`, loaded once a process."""
    with _MODELS_LOCK:
        if dimension not in _MODELS:
            wordllama = _import_wordllama()
            WordLlama = wordllama.WordLlama  # noqa: N806

            _MODELS[dimension] = WordLlama.load(
                config=WORDLLAMA_CONFIG,
                cache_dir=Path(wordllama.__file__).parent,
                dim=WORDLLAMA_DIMENSION,
                trunc_dim=None if dimension == WORDLLAMA_DIMENSION else dimension,
                disable_download=True,
            )
        return _MODELS[dimension]


class WordLlamaEmbedder:
    """WordLlama's bundled model, loaded from the package itself with downloads forbidden (its
    loader otherwise looks for a `tokenizer` folder and fetches one). Loaded on first use."""

    def __init__(self, dimension: int = WORDLLAMA_DIMENSION) -> None:
        # A smaller `dimension` keeps the model's first dimensions (it is trained to allow that):
        # another embedding, recorded under another name.
        self.dimension = dimension
        self.name = f"wordllama/{WORDLLAMA_CONFIG}" + (
            "" if dimension == WORDLLAMA_DIMENSION else f"@{dimension}"
        )
        self._model: Any = None

    def _loaded(self) -> Any:
        if self._model is None:
            self._model = load_wordllama(self.dimension)
        return self._model

    def embed(self, texts: Sequence[str]) -> list[list[float]]:
        if not texts:
            return []
        vectors = self._loaded().embed(list(texts), norm=True)
        return [[float(x) for x in row] for row in vectors]


class OpenAIEmbedder:
    """An embeddings endpoint that speaks OpenAI's protocol (`langchain-openai`)."""

    def __init__(
        self, *, model: str, dimension: int, api_key: str, base_url: str | None = None, timeout: float = 30.0
    ) -> None:
        self.name = f"openai/{model}"
        self.dimension = dimension
        self._model = model
        self._api_key = api_key
        self._base_url = base_url
        self._timeout = timeout
        self._client: Any = None

    def embed(self, texts: Sequence[str]) -> list[list[float]]:
        if not texts:
            return []
        if self._client is None:
            from langchain_openai import OpenAIEmbeddings
            from pydantic import SecretStr

            self._client = OpenAIEmbeddings(
                model=self._model,
                dimensions=self.dimension,
                api_key=SecretStr(self._api_key),
                base_url=self._base_url,
                timeout=self._timeout,
                check_embedding_ctx_length=False,
            )
        import openai

        from market_analyst.errors import ServiceUnavailable

        try:
            vectors = self._client.embed_documents(list(texts))
        except openai.APIStatusError as exc:
            raise ServiceUnavailable(
                f"the embeddings endpoint answered HTTP {exc.status_code} for {self._model}: check "
                "OPENAI_API_KEY and MA_OPENAI_EMBEDDING_MODEL, or try again later"
            ) from None
        except openai.APIError as exc:
            raise ServiceUnavailable(
                f"the embeddings endpoint did not answer ({type(exc).__name__}): try again when it is back"
            ) from None
        return [[float(x) for x in row] for row in vectors]
