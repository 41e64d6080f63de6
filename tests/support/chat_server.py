"""A local HTTP server that speaks OpenAI's chat-completions protocol, answering from a script.

Stands in for a model endpoint, which cannot run here. Each request takes the next scripted step:

    {"answer": {...}}                      call `submit_analysis` with these arguments
    {"call": "tool_name", "arguments": {}} call one of the data tools the request offers
    {"text": "..."}                        reply with plain text, calling no tool
    {"status": 500}                        fail with that HTTP status
    {"hang": 5}                            say nothing for that many seconds (then fail with 504)

With the script used up it answers 503. Every request body is recorded, in order.
"""

from __future__ import annotations

import json
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

ANSWER_TOOL = "submit_analysis"


def _completion(number: int, model: str, message: dict[str, Any]) -> dict[str, Any]:
    return {
        "id": f"chatcmpl-{number}",
        "object": "chat.completion",
        "created": 1739577600,
        "model": model,
        "choices": [
            {
                "index": 0,
                "finish_reason": "tool_calls" if message.get("tool_calls") else "stop",
                "message": message,
            }
        ],
        "usage": {"prompt_tokens": 10, "completion_tokens": 10, "total_tokens": 20},
    }


def _message(step: dict[str, Any], number: int, offered: list[str]) -> dict[str, Any]:
    if "text" in step:
        return {"role": "assistant", "content": step["text"]}
    name = ANSWER_TOOL if "answer" in step else step["call"]
    assert name in offered, f"the script calls {name}, but the request offers {offered}"
    arguments = step["answer"] if "answer" in step else step.get("arguments", {})
    call = {
        "id": f"call_{number}",
        "type": "function",
        "function": {"name": name, "arguments": json.dumps(arguments)},
    }
    return {"role": "assistant", "content": None, "tool_calls": [call]}


class ChatServer:
    """Serves `POST /v1/chat/completions` from a script; records every request body."""

    def __init__(self, script: list[dict[str, Any]]) -> None:
        self.script = list(script)
        self.requests: list[dict[str, Any]] = []
        self.lock = threading.Lock()
        server = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args: Any) -> None:
                pass

            def do_POST(self) -> None:  # noqa: N802 - the name http.server calls
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                with server.lock:
                    server.requests.append({"path": self.path, "body": body})
                    number = len(server.requests)
                    step = server.script.pop(0) if server.script else {"status": 503}
                if "hang" in step:
                    time.sleep(step["hang"])
                    step = {"status": 504}
                if "status" in step:
                    failure = {"error": {"message": "scripted failure", "type": "server_error"}}
                    self._send(step["status"], failure)
                    return
                offered = [t["function"]["name"] for t in body.get("tools", [])]
                self._send(200, _completion(number, body["model"], _message(step, number, offered)))

            def _send(self, status: int, payload: dict[str, Any]) -> None:
                data = json.dumps(payload).encode()
                try:
                    self.send_response(status)
                    self.send_header("Content-Type", "application/json")
                    self.send_header("Content-Length", str(len(data)))
                    self.end_headers()
                    self.wfile.write(data)
                except (BrokenPipeError, ConnectionResetError):
                    pass  # the client gave up waiting (a timeout the test asked for)

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.httpd.daemon_threads = True
        self.thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.httpd.server_address[1]}/v1"

    def env(self, model: str = "test-model") -> dict[str, str]:
        """The settings that point the LLM analyst at this server."""
        return {"OPENAI_API_KEY": "test-key", "OPENAI_BASE_URL": self.base_url, "MA_OPENAI_MODEL": model}

    def messages(self, index: int) -> str:
        """The messages of request `index`, as one JSON text to search."""
        return json.dumps(self.requests[index]["body"]["messages"])

    def __enter__(self) -> ChatServer:
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()
