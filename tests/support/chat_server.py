"""A local HTTP server that speaks OpenAI's chat-completions protocol, answering from a script.

Stands in for a model endpoint, which cannot run here. It validates every request the way OpenAI's
endpoint does (see `protocol_errors`) and answers a request that breaks a rule with HTTP 400 and an
`invalid_request_error`, as OpenAI does; each such request is kept in `violations`, so a test can
assert there were none. Each valid request takes the next scripted step:

    {"answer": {...}}                      call `submit_analysis` with these arguments
    {"call": "tool_name", "arguments": {}} call a tool (any name: a model may call one never offered);
                                           "arguments" may be a raw string (not JSON, cut off), and
                                           "id" the tool-call ID to send ("" for none)
    {"calls": [{"name": ..., "arguments": ..., "id": ...}, ...]}   several calls in one message
    {"text": "..."}                        reply with plain text, calling no tool
    {"status": 500, "headers": {...}}      fail with that HTTP status (and headers, e.g. Retry-After)
    {"hang": 5}                            say nothing for that many seconds (then fail with 504)
    {"completion": {...}}                  send this JSON body with 200, whatever it is
    {"raw": "<html>", "content_type": "text/html"}   send these bytes with 200
    {"finish_reason": "length", ...}       with a call: the reason the choice gives

With the script used up it takes `then` (by default a 503) for every further request. Every request
body is recorded in order, with the time it arrived.
"""

from __future__ import annotations

import json
import re
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

ANSWER_TOOL = "submit_analysis"
_FUNCTION_NAME = re.compile(r"^[a-zA-Z0-9_-]{1,64}$")
_ROLES = ("system", "developer", "user", "assistant", "tool")


def _text_content(content: Any) -> bool:
    if isinstance(content, str):
        return True
    return isinstance(content, list) and all(
        isinstance(part, dict) and part.get("type") == "text" and isinstance(part.get("text"), str)
        for part in content
    )


def _call_errors(where: str, call: Any, seen_ids: set[str]) -> list[str]:
    if not isinstance(call, dict):
        return [f"{where}: a tool call must be an object"]
    errors = []
    call_id = call.get("id")
    if not isinstance(call_id, str) or not call_id:
        errors.append(f"{where}.id: a tool call needs a non-empty 'id'")
    elif call_id in seen_ids:
        errors.append(f"{where}.id: duplicate tool call id '{call_id}'")
    else:
        seen_ids.add(call_id)
    if call.get("type") != "function":
        errors.append(f"{where}.type: must be 'function'")
    function = call.get("function")
    if not isinstance(function, dict):
        return [*errors, f"{where}.function: missing"]
    name = function.get("name")
    if not isinstance(name, str) or not _FUNCTION_NAME.match(name):
        errors.append(f"{where}.function.name: {name!r} does not match '^[a-zA-Z0-9_-]{{1,64}}$'")
    arguments = function.get("arguments")
    if not isinstance(arguments, str):
        errors.append(f"{where}.function.arguments: must be a string")
    else:
        try:
            parsed = json.loads(arguments)
        except ValueError:
            errors.append(f"{where}.function.arguments: is not valid JSON")
        else:
            if not isinstance(parsed, dict):
                errors.append(f"{where}.function.arguments: must be a JSON object")
    return errors


def protocol_errors(body: Any) -> list[str]:
    """What OpenAI's endpoint would refuse in this request body (empty when it is valid): message
    roles and contents, tool calls with unique non-empty IDs, names it accepts and JSON-object
    arguments, every tool call answered by a tool message before the next message of another role,
    no tool message that answers nothing, and tools and `tool_choice` that agree."""
    if not isinstance(body, dict):
        return ["the body must be a JSON object"]
    errors: list[str] = []
    if not isinstance(body.get("model"), str) or not body["model"]:
        errors.append("model: required")
    messages = body.get("messages")
    if not isinstance(messages, list) or not messages:
        return [*errors, "messages: a non-empty array is required"]
    seen_ids: set[str] = set()
    pending: list[str] = []  # tool-call IDs of the last assistant message not yet answered
    for index, message in enumerate(messages):
        where = f"messages[{index}]"
        if not isinstance(message, dict) or message.get("role") not in _ROLES:
            errors.append(f"{where}.role: must be one of {', '.join(_ROLES)}")
            continue
        role = message["role"]
        if role != "tool" and pending:
            errors.append(
                "An assistant message with 'tool_calls' must be followed by tool messages responding "
                f"to each 'tool_call_id'. The following tool_call_ids did not have response messages: "
                f"{', '.join(pending)}"
            )
            pending = []
        if role in ("system", "developer", "user") and not _text_content(message.get("content")):
            errors.append(f"{where}.content: a {role} message needs text content")
        elif role == "assistant":
            calls = message.get("tool_calls")
            content = message.get("content")
            if calls is None:
                if not _text_content(content):
                    errors.append(f"{where}.content: an assistant message needs content or tool_calls")
                continue
            if not isinstance(calls, list) or not calls:
                errors.append(f"{where}.tool_calls: must be a non-empty array")
                continue
            if content is not None and not _text_content(content):
                errors.append(f"{where}.content: must be text or null")
            for number, call in enumerate(calls):
                errors += _call_errors(f"{where}.tool_calls[{number}]", call, seen_ids)
            pending = [c["id"] for c in calls if isinstance(c, dict) and isinstance(c.get("id"), str)]
        elif role == "tool":
            call_id = message.get("tool_call_id")
            if call_id not in pending:
                errors.append(
                    f"{where}: messages with role 'tool' must be a response to a preceding message "
                    f"with 'tool_calls' (tool_call_id {call_id!r})"
                )
            else:
                pending.remove(call_id)
            if not _text_content(message.get("content")):
                errors.append(f"{where}.content: a tool message needs text content")
    if pending:
        errors.append(f"tool_call_ids without a response message: {', '.join(pending)}")
    errors += _tools_errors(body)
    return errors


def _tools_errors(body: dict[str, Any]) -> list[str]:
    tools = body.get("tools")
    names: list[str] = []
    errors = []
    if tools is not None:
        if not isinstance(tools, list):
            return ["tools: must be an array"]
        for index, tool in enumerate(tools):
            function = tool.get("function") if isinstance(tool, dict) else None
            name = function.get("name") if isinstance(function, dict) else None
            if tool.get("type") != "function" or not isinstance(name, str) or not _FUNCTION_NAME.match(name):
                errors.append(f"tools[{index}]: a function with a valid name is required")
            elif name in names:
                errors.append(f"tools[{index}]: duplicate function name '{name}'")
            else:
                names.append(name)
    choice = body.get("tool_choice")
    if isinstance(choice, dict):
        chosen = (choice.get("function") or {}).get("name")
        if chosen not in names:
            errors.append(f"tool_choice: function '{chosen}' is not among the tools")
    elif choice is not None and choice not in ("auto", "none", "required"):
        errors.append(f"tool_choice: invalid value {choice!r}")
    elif choice in ("auto", "required") and not names:
        errors.append("tool_choice: is only allowed when tools are specified")
    return errors


def _completion(number: int, model: str, message: dict[str, Any], finish: str | None) -> dict[str, Any]:
    return {
        "id": f"chatcmpl-{number}",
        "object": "chat.completion",
        "created": 1739577600,
        "model": model,
        "choices": [
            {
                "index": 0,
                "finish_reason": finish or ("tool_calls" if message.get("tool_calls") else "stop"),
                "message": message,
            }
        ],
        "usage": {"prompt_tokens": 10, "completion_tokens": 10, "total_tokens": 20},
    }


def _arguments(arguments: Any) -> str:
    return arguments if isinstance(arguments, str) else json.dumps(arguments)


def _message(step: dict[str, Any], number: int) -> dict[str, Any]:
    if "text" in step:
        return {"role": "assistant", "content": step["text"]}
    if "calls" in step:
        wanted = step["calls"]
    elif "answer" in step:
        wanted = [{"name": ANSWER_TOOL, "arguments": step["answer"], "id": step.get("id")}]
    else:
        wanted = [{"name": step["call"], "arguments": step.get("arguments", {}), "id": step.get("id")}]
    calls = [
        {
            "id": f"call_{number}" + (f"_{i}" if i else "") if call.get("id") is None else call["id"],
            "type": "function",
            "function": {"name": call["name"], "arguments": _arguments(call.get("arguments", {}))},
        }
        for i, call in enumerate(wanted)
    ]
    return {"role": "assistant", "content": None, "tool_calls": calls}


class ChatServer:
    """Serves `POST /v1/chat/completions` from a script; records every request body and refuses, as
    OpenAI does, any request whose messages break the protocol."""

    def __init__(self, script: list[dict[str, Any]], then: dict[str, Any] | None = None) -> None:
        self.script = list(script)
        self.then = then or {"status": 503}
        self.requests: list[dict[str, Any]] = []
        self.arrived: list[float] = []  # time.monotonic() of each request
        self.violations: list[list[str]] = []  # the protocol errors of each refused request
        self.lock = threading.Lock()
        server = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args: Any) -> None:
                pass

            def do_POST(self) -> None:  # noqa: N802 - the name http.server calls
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                errors = protocol_errors(body)
                with server.lock:
                    server.requests.append({"path": self.path, "body": body})
                    server.arrived.append(time.monotonic())
                    number = len(server.requests)
                    if errors:
                        server.violations.append(errors)
                        step: dict[str, Any] = {"invalid": errors}
                    else:
                        step = server.script.pop(0) if server.script else dict(server.then)
                if "invalid" in step:
                    error = {
                        "message": "; ".join(step["invalid"]),
                        "type": "invalid_request_error",
                        "param": "messages",
                        "code": None,
                    }
                    self._send(400, json.dumps({"error": error}).encode())
                    return
                if "hang" in step:
                    time.sleep(step["hang"])
                    step = {"status": 504}
                if "status" in step:
                    failure = step.get("body") or {
                        "error": {"message": "scripted failure", "type": "server_error"}
                    }
                    self._send(step["status"], json.dumps(failure).encode(), step.get("headers"))
                elif "raw" in step:
                    self._send(200, step["raw"].encode(), content_type=step.get("content_type", "text/html"))
                elif "completion" in step:
                    self._send(200, json.dumps(step["completion"]).encode())
                else:
                    message = _message(step, number)
                    completion = _completion(number, body["model"], message, step.get("finish_reason"))
                    self._send(200, json.dumps(completion).encode())

            def _send(
                self,
                status: int,
                data: bytes,
                headers: dict[str, str] | None = None,
                content_type: str = "application/json",
            ) -> None:
                try:
                    self.send_response(status)
                    self.send_header("Content-Type", content_type)
                    self.send_header("Content-Length", str(len(data)))
                    for name, value in (headers or {}).items():
                        self.send_header(name, value)
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

    def tool_replies(self, index: int) -> list[dict[str, Any]]:
        """The tool messages request `index` sent, in order."""
        return [m for m in self.requests[index]["body"]["messages"] if m["role"] == "tool"]

    def __enter__(self) -> ChatServer:
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()
