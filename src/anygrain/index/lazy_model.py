"""An index's torch model, held or loaded on first use.

A dense or phrase index whose questions run on ONNX Runtime needs its torch model only to
encode passages (adding documents, re-scoring, training), so it is opened with what loads
the model and loads it when first asked for; both kinds (and their sharded views) share
this one holder.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Generic, TypeVar, cast

M = TypeVar("M")


class LazyModel(Generic[M]):
    """The ``model`` of an index: held, or loaded on first use from a loader; setting it
    sets what encodes questions (``questions``) too."""

    _model: M | None
    _load_model: Callable[[], M] | None
    questions: Any

    def hold_model(self, model: M | Callable[[], M], *, loaded: bool) -> None:
        """Hold ``model`` itself when ``loaded``, else what loads it (a model may be callable
        too, so the caller says which it is)."""
        self._model = cast(M, model) if loaded else None
        self._load_model = None if loaded else cast(Callable[[], M], model)

    @property
    def model(self) -> M:
        """The torch model, loaded on first use when questions run on ONNX Runtime."""
        if self._model is None:
            assert self._load_model is not None
            self._model = self._load_model()
        return self._model

    @model.setter
    def model(self, value: M) -> None:
        self._model = value
        self.questions = value

    def model_or_loader(self) -> M | Callable[[], M]:
        """The model if loaded, else what loads it, loading nothing (a sharded index takes
        its first shard's: questions on ONNX Runtime load no torch)."""
        if self._model is not None:
            return self._model
        assert self._load_model is not None
        return self._load_model
