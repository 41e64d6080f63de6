"""Helpers the tests share: real services, the CLI runner, the crash harness, the model stand-in."""

from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
# The master key every host of a shared records database wraps its data keys with (MA_MASTER_KEY):
# required there, since one host's key file would lock the others out of its threads.
MASTER_KEY = "AAECAwQFBgcICQoLDA0ODxAREhMUFRYXGBkaGxwdHh8="
SHARED_RECORDS = {"MA_RECORDS": "postgres", "MA_MASTER_KEY": MASTER_KEY}
