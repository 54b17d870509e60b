"""A small deterministic mutator (libFuzzer's moves: flip, insert, erase, copy, splice, dictionary words) for the
fuzz smoke in `make test`, which must not depend on atheris's timing."""

from __future__ import annotations

import random
from collections.abc import Iterator, Sequence

WORDS: tuple[bytes, ...] = (
    b"+Inf", b"-Inf", b"NaN", b"1e999", b"-1", b"0", b"\n", b"\r\n", b"\x00", b"\xff", b'le="+Inf"', b"{", b"}",
    b"[", b"]", b'"', b"\\", b"=", b",", b" ", b"# TYPE ", b"_total", b"_bucket", b"vllm:", b"vllm_",
    b"content-length: ", b"transfer-encoding: chunked\r\n", b"\r\n\r\n", b"HTTP/1.1 ", b"0\r\n\r\n",
    b"ERROR ", b"INFO ", b"Traceback", b"CUDA out of memory", b"nan", b"inf", b"9" * 40, b"true", b"null",
)


def _mutate(rng: random.Random, data: bytes, others: Sequence[bytes]) -> bytes:
    buf = bytearray(data)
    for _ in range(rng.randint(1, 4)):
        move = rng.randrange(6)
        pos = rng.randint(0, len(buf))
        if move == 0 and buf:
            i = rng.randrange(len(buf))
            buf[i] ^= 1 << rng.randrange(8)
        elif move == 1:
            buf[pos:pos] = bytes(rng.randrange(256) for _ in range(rng.randint(1, 8)))
        elif move == 2 and buf:
            del buf[pos:pos + rng.randint(1, 64)]
        elif move == 3 and buf:
            start = rng.randrange(len(buf))
            buf[pos:pos] = buf[start:start + rng.randint(1, 128)]
        elif move == 4 and others:
            other = rng.choice(others)
            cut = rng.randint(0, len(other))
            buf = buf[:pos] + bytearray(other[cut:])
        else:
            buf[pos:pos] = rng.choice(WORDS)
    return bytes(buf)


def mutants(seeds: Sequence[bytes], n: int, *, seed: int = 0) -> Iterator[bytes]:
    """`n` mutated inputs from `seeds` (the same ones every run for the same `seed`), then a few degenerate ones."""
    rng = random.Random(seed)
    for _ in range(n):
        yield _mutate(rng, rng.choice(seeds), seeds) if seeds else rng.randbytes(rng.randint(0, 64))
    yield from (b"", b"\n", b"\x00" * 8, bytes(range(256)))
