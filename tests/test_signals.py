"""SIGTERM stops work like Ctrl-C: held during an update, then KeyboardInterrupt."""

from __future__ import annotations

import os
import signal

import pytest

from anygrain.cli.main import stop_on_sigterm
from anygrain.train.runlog import defer_sigint


@pytest.fixture
def restore_handlers():  # type: ignore[no-untyped-def]
    saved = {s: signal.getsignal(s) for s in (signal.SIGINT, signal.SIGTERM)}
    yield
    for s, h in saved.items():
        signal.signal(s, h)


@pytest.mark.usefixtures("restore_handlers")
@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM])
def test_signal_is_held_until_the_block_ends(sig: signal.Signals) -> None:
    stop_on_sigterm()
    done = []
    with pytest.raises(KeyboardInterrupt), defer_sigint():
        os.kill(os.getpid(), sig)
        done.append("update finished")  # not cut short by the signal
    assert done == ["update finished"]


@pytest.mark.usefixtures("restore_handlers")
def test_sigterm_raises_keyboard_interrupt_outside_a_block() -> None:
    stop_on_sigterm()
    with pytest.raises(KeyboardInterrupt):
        os.kill(os.getpid(), signal.SIGTERM)  # Python runs the handler at the next bytecode
        for _ in range(1000):
            pass
