"""repokit: validate, compile, serve and load-test Triton-style model repositories."""

__version__ = "0.1.0"
