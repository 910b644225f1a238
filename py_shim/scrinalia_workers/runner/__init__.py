"""The reference runner: claims runs, calls their handlers, reports (`scrinalia-runner`)."""

from scrinalia_workers.runner.daemon import Runner, main

__all__ = ["Runner", "main"]
