"""`doctor demo` opens the TUI only with a terminal on both ends and never under CI=true or --headless."""

from __future__ import annotations

from doctor.demo_tui import wants_tui


def test_the_tui_only_with_a_terminal_and_never_under_ci() -> None:
    assert wants_tui(None, stdin_tty=True, stdout_tty=True, environ={})
    assert not wants_tui(None, stdin_tty=False, stdout_tty=True, environ={})
    assert not wants_tui(None, stdin_tty=True, stdout_tty=False, environ={})
    assert not wants_tui(None, stdin_tty=True, stdout_tty=True, environ={"CI": "true"})
    assert not wants_tui("tui", stdin_tty=True, stdout_tty=True, environ={"CI": "true"})
    assert not wants_tui("tui", stdin_tty=False, stdout_tty=False, environ={})
    assert not wants_tui("headless", stdin_tty=True, stdout_tty=True, environ={})
