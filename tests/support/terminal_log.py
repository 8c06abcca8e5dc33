"""What a pseudo-terminal showed, kept for the interrupt tests' checks (pexpect's ``logfile_read``)."""

from __future__ import annotations


class TerminalLog:
    """A pexpect log that keeps what the terminal showed."""

    def __init__(self, into: list[str]) -> None:
        self.into = into

    def write(self, text: str) -> None:
        self.into.append(text)

    def flush(self) -> None:
        pass
