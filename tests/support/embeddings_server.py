"""An OpenAI-compatible embeddings endpoint for the tests (a model endpoint cannot run here)."""

from __future__ import annotations

from typing import Any


class EmbeddingsServer:
    """Stands in for an OpenAI-compatible embeddings endpoint (a model endpoint cannot run here):
    answers `POST /v1/embeddings` with a vector per input, made from the text's words, and keeps
    each request body."""

    def __init__(self) -> None:
        import json
        import threading
        from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

        self.requests: list[dict[str, Any]] = []
        server = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args: Any) -> None:
                pass

            def do_POST(self) -> None:  # noqa: N802 - the name http.server calls
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                server.requests.append({"path": self.path, **body})
                size = int(body.get("dimensions") or 8)
                data = [
                    {"object": "embedding", "index": i, "embedding": bag_of_words(text, size)}
                    for i, text in enumerate(body["input"])
                ]
                reply = json.dumps(
                    {"object": "list", "data": data, "model": body["model"], "usage": {}}
                ).encode()
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(reply)))
                self.end_headers()
                self.wfile.write(reply)

        self._http = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._thread = threading.Thread(target=self._http.serve_forever, daemon=True)
        self._thread.start()
        self.url = f"http://127.0.0.1:{self._http.server_address[1]}/v1"

    def close(self) -> None:
        self._http.shutdown()
        self._http.server_close()


def bag_of_words(text: str, size: int) -> list[float]:
    import hashlib
    import math

    vector = [0.0] * size
    for word in text.lower().split():
        vector[int(hashlib.sha256(word.strip(".,:;?!").encode()).hexdigest(), 16) % size] += 1.0
    norm = math.sqrt(sum(x * x for x in vector)) or 1.0
    return [x / norm for x in vector]
