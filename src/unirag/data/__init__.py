"""Data model (typed records) and readers/writers for the M-BEIR interchange format."""

from unirag.data.records import Candidate, Modality, Qrels, Query

__all__ = ["Candidate", "Modality", "Qrels", "Query"]
