"""How llama.cpp loads a GGUF on this machine: repacked weights or the file's own, mapped or read.

    .venv/bin/python bench/bench_local_load.py MODEL.gguf [--rounds 3]

For each of three ways (A: repacked from the mapped file, B: the mapped file's weights as they
are, C: repacked from a read file) a fresh process loads the model (n_ctx 8192, 2 threads), reads
a 1,000-token prompt and generates 32 tokens greedily; it prints the load time, the prompt's and
the generation's tokens per second and the process's peak RSS. Rounds are interleaved so the
machine's drift hits every way alike. Prints lines; nothing here is asserted anywhere.
"""
from __future__ import annotations

import argparse
import subprocess
import sys

WAYS = {"A repacked, mapped": (True, True), "B not repacked, mapped": (False, True),
        "C repacked, read": (True, False)}

CHILD = """
import resource, sys, time
from llama_cpp import Llama
repack, mmap = sys.argv[2] == "1", sys.argv[3] == "1"

class Loaded(Llama):  # Llama() has no argument for use_extra_bufts: set on the params it makes
    @property
    def model_params(self):
        return self.__dict__["model_params"]

    @model_params.setter
    def model_params(self, params):
        params.use_extra_bufts = repack
        self.__dict__["model_params"] = params

start = time.perf_counter()
m = Loaded(model_path=sys.argv[1], n_ctx=8192, n_threads=2, use_mmap=mmap, verbose=False)
load = time.perf_counter() - start
prompt = m.tokenize(b"The quick brown fox jumps over the lazy dog. " * 200)[:1000]
start = time.perf_counter()
m.eval(prompt)
read = time.perf_counter() - start
start = time.perf_counter()
for _ in range(32):
    m.eval([m.sample(temp=0)])
generate = time.perf_counter() - start
rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
print(f"load {load * 1000:.0f} ms, prompt {1000 / read:.0f} tokens/s, generation {32 / generate:.1f} tokens/s, "
      f"peak RSS {rss:.0f} MB")
"""


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("model")
    ap.add_argument("--rounds", type=int, default=3)
    args = ap.parse_args()
    for n in range(args.rounds):
        for name, (repack, mmap) in WAYS.items():
            out = subprocess.run([sys.executable, "-c", CHILD, args.model, str(int(repack)), str(int(mmap))],
                                 capture_output=True, text=True, check=True).stdout.strip()
            print(f"round {n + 1}, {name}: {out}", flush=True)


if __name__ == "__main__":
    main()
