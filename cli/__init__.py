"""The ``gmp`` command line: a thin typer app; each module owns one command group."""
