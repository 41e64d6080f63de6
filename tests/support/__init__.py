"""Helpers the tests share: real services, the CLI runner, the crash harness, the model stand-in."""

from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
