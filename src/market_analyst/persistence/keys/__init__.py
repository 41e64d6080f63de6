"""The data keys that encrypt checkpoints: one per thread, recorded under the thread's owner and
wrapped by the master key. `base.py` holds the wrapping and the keyring the savers' cipher asks;
`files.py` and `postgres.py` keep the wrapped keys in the data directory or the records database."""
