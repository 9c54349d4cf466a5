"""Helpers shared by the server tests (plain functions, not fixtures)."""

from __future__ import annotations

import threading
from typing import Any

from fastapi.testclient import TestClient


def concurrent_hits(
    client: TestClient, questions: list[str], *, clients: int = 4, rounds: int = 1, k: int = 3
) -> dict[str, list[Any]]:
    """Each question's hits from ``GET /search``, asked by ``clients`` threads at once (each
    its share of the questions, ``rounds`` times over); any failed request fails the call."""
    got: dict[str, list[Any]] = {}
    errors: list[BaseException] = []

    def worker(mine: list[str]) -> None:
        try:
            for _ in range(rounds):
                for q in mine:
                    r = client.get("/search", params={"q": q, "k": k})
                    assert r.status_code == 200, r.text
                    got[q] = r.json()["hits"]
        except BaseException as e:  # reported below
            errors.append(e)

    threads = [
        threading.Thread(target=worker, args=(questions[i::clients],)) for i in range(clients)
    ]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=120)
    assert not errors, errors[0]
    return got
