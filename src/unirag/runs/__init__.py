"""Durable run outputs: atomic writes, append-only JSONL result stores that resume after a crash."""
