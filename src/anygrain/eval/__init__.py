"""Evaluation: answer matching (DPR, SQuAD, CMRC), TREC runs and qrels, metrics, ``evaluate``."""

from anygrain.eval.answers import has_answer, phrase_match
from anygrain.eval.evaluate import DEFAULT_METRICS, EvalReport, evaluate, evaluate_run
from anygrain.eval.metrics import Metric, UnknownMetricError, available_metrics, parse_metrics
from anygrain.eval.runs import read_qrels, read_run, write_run
from anygrain.eval.squad import exact_match, f1

__all__ = [
    "DEFAULT_METRICS",
    "EvalReport",
    "Metric",
    "UnknownMetricError",
    "available_metrics",
    "evaluate",
    "evaluate_run",
    "exact_match",
    "f1",
    "has_answer",
    "parse_metrics",
    "phrase_match",
    "read_qrels",
    "read_run",
    "write_run",
]
