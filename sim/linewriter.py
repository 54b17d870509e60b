"""The engine's log sink, shared by the API server process and the EngineCore child."""

from __future__ import annotations

from pathlib import Path
from typing import TextIO


class LineWriter:
    """Log sink: each line to a stream (stdout, like vLLM) and optionally appended to a file."""

    def __init__(self, stream: TextIO | None, path: Path | None = None) -> None:
        self.stream = stream
        self.file = open(path, "a", buffering=1, encoding="utf-8") if path else None  # noqa: SIM115
        self.lines: list[str] = []
        self.keep = False

    def __call__(self, lines: list[str]) -> None:
        text = "".join(line + "\n" for line in lines)
        if self.stream is not None:
            self.stream.write(text)
            self.stream.flush()
        if self.file is not None:
            self.file.write(text)
        if self.keep:
            self.lines.extend(lines)

    def close(self) -> None:
        if self.file is not None:
            self.file.close()
