"""A corpus that ships with Python itself, so the demo runs offline with nothing to fetch.

CPython's ``pydoc_data.topics`` holds the language reference topics that
``help()`` prints: 79 documents, ~465k characters of real technical prose.
"""

from __future__ import annotations

from collections.abc import Iterator

from anygrain.corpus.questions import Question, Questions
from anygrain.corpus.records import SourceDocument


def pydoc_topics() -> Iterator[SourceDocument]:
    from pydoc_data.topics import topics

    for name in sorted(topics):
        text = topics[name].strip()
        if text:
            yield SourceDocument(
                doc_id=name, title=name, text=text, origin=f"pydoc_data.topics[{name!r}]"
            )


# Questions a Python user asks, with answer strings that occur in the reference text.
DEMO_QUESTIONS: list[tuple[str, list[str]]] = [
    ("Which statement is used to handle exceptions?", ["try"]),
    ("What keyword defines an anonymous function?", ["lambda"]),
    ("Which statement exits the nearest enclosing loop?", ["break"]),
    ("What does the yield expression produce when used in a function body?", ["generator"]),
    ("Which method is called to get the length of an object?", ["__len__"]),
    ("Which statement declares that names refer to module-level variables?", ["global"]),
    ("What statement does nothing and is used as a placeholder?", ["pass"]),
    ("Which method is called when an attribute lookup fails?", ["__getattr__"]),
    ("What operator is used for matrix multiplication?", ["@"]),
    ("Which statement is used to assert a condition while debugging?", ["assert"]),
]


def demo_questions() -> Questions:
    return Questions(
        [Question(id=f"demo-{i}", text=t, answers=a) for i, (t, a) in enumerate(DEMO_QUESTIONS)],
        source="anygrain.corpus.builtin",
        format="builtin",
    )
