"""Command line interface. Each command lives in its own module and is imported only when run."""
