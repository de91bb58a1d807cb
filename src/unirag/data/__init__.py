"""Data model (typed records) and readers/writers for the M-BEIR interchange format."""
