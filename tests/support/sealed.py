"""What a thread's checkpoints hold as the saver stored them, for tests that show a sealed copy stops
opening once its key is erased."""

from __future__ import annotations


def sealed_copies(environ: dict[str, str], thread_ids: list[str]) -> list[tuple[str, bytes]]:
    """The threads' pending writes and blobs as the saver stored them: (type with cipher name, ciphertext)."""
    from market_analyst.deps import open_checkpointer
    from market_analyst.settings import Settings

    settings = Settings.load(environ=environ, dotenv=None)
    copies: list[tuple[str, bytes]] = []
    with open_checkpointer(settings) as backend:
        if settings.checkpointer == "postgres":
            with backend.saver.conn.cursor() as cur:
                cur.execute(
                    "SELECT type, blob FROM checkpoint_writes WHERE thread_id = ANY(%s) "
                    "UNION ALL SELECT type, blob FROM checkpoint_blobs WHERE thread_id = ANY(%s)",
                    (thread_ids, thread_ids),
                )
                copies = [(row["type"], bytes(row["blob"])) for row in cur.fetchall() if row["blob"]]
        else:
            import base64

            for key in backend.client.scan_iter("checkpoint_write:*", count=1000):
                doc = backend.client.json().get(key)
                if any(t in key.decode() for t in thread_ids):
                    copies.append((doc["type"], base64.b64decode(doc["blob"])))
    return copies
