"""The chat model behind the LLM analyst (through `langchain-openai`, any OpenAI-compatible server).

`LLMAnalyst.respond` is one model turn of the analyst's agent loop (`nodes/agent/`): the
conversation so far in, one assistant message out, with the data tools and the `submit_analysis`
tool offered. Any request that does not end in a valid completion (no connection, a timeout, any
HTTP error, a body that is not a completion: bad JSON, an `error` object, no choices, HTML) is the
model service failing: it is sent again with backoff (or after the server's `Retry-After`, up to
`MAX_RETRY_AFTER` seconds), `MA_LLM_ATTEMPTS` requests of at most `MA_LLM_TIMEOUT` seconds each; then
the turn stops with `ServiceUnavailable` (nothing that finished is lost; `resume` asks again).
"""

from __future__ import annotations

import email.utils
import time
import unicodedata
from collections.abc import Callable
from typing import Annotated, Any, Literal

from pydantic import BaseModel, Field, SecretStr, StringConstraints, model_validator
from tenacity import (
    RetryCallState,
    Retrying,
    retry_if_exception_type,
    stop_after_attempt,
    stop_after_delay,
    wait_exponential,
)

from market_analyst.errors import ServiceUnavailable
from market_analyst.prompts import ANSWER_DESCRIPTION, ANSWER_TOOL

ANALYST_VERSION = "3"
# Limits on what the model writes: each risk factor is a line, the summary a paragraph, and the whole
# prose of an answer fits on a page, so no field can carry a document into the report.
MAX_SUMMARY_CHARS = 2000
MAX_RISK_FACTOR_CHARS = 300
MAX_CHANGE_CHARS = 500
MAX_ANSWER_CHARS = 4000
# The longest wait a server's Retry-After header can ask for between two attempts.
MAX_RETRY_AFTER = 30.0


def one_line(text: Any) -> Any:
    """Model prose as one line of plain words: every run of white space (line breaks and Unicode
    separators too) becomes one space and other control or format characters are dropped, so no
    text of the model can start a line of a report (a heading, a table row, a "Recommendation:"
    line of its own)."""
    if not isinstance(text, str):
        return text
    kept = "".join(
        " " if ch.isspace() else ch
        for ch in text
        if ch.isspace() or unicodedata.category(ch) not in ("Cc", "Cf")
    )
    return " ".join(kept.split())


RiskFactor = Annotated[str, StringConstraints(min_length=1, max_length=MAX_RISK_FACTOR_CHARS)]


class FeedbackResponse(BaseModel):
    """What the analyst did about one reviewer feedback item."""

    feedback: str = Field(description="The feedback item, as the reviewer wrote it.")
    change: str = Field(
        min_length=1,
        max_length=MAX_CHANGE_CHARS,
        description="What this draft changed in response, or why it changed nothing.",
    )
    acted: bool = Field(description="True if the draft changed because of this item.")


class LLMAnalysis(BaseModel):
    """The analyst's final answer: the draft's judgement fields, nothing else."""

    recommendation: Literal["buy", "hold", "sell"]
    confidence: float = Field(ge=0.0, le=1.0)
    summary: str = Field(min_length=1, max_length=MAX_SUMMARY_CHARS)
    risk_factors: list[RiskFactor] = Field(
        max_length=10,
        description=f"Up to ten risk factors, each one line of at most {MAX_RISK_FACTOR_CHARS} characters.",
    )
    feedback_responses: list[FeedbackResponse] = Field(
        default_factory=list,
        max_length=20,
        description="One entry per reviewer feedback item, naming the item by its text.",
    )

    @model_validator(mode="before")
    @classmethod
    def _prose_on_one_line(cls, data: Any) -> Any:
        if not isinstance(data, dict):
            return data
        data = dict(data)
        data["summary"] = one_line(data.get("summary"))
        if isinstance(data.get("risk_factors"), list):
            data["risk_factors"] = [one_line(r) for r in data["risk_factors"]]
        if isinstance(data.get("feedback_responses"), list):
            data["feedback_responses"] = [
                {**r, "change": one_line(r.get("change"))} if isinstance(r, dict) else r
                for r in data["feedback_responses"]
            ]
        return data

    @model_validator(mode="after")
    def _within_total(self) -> LLMAnalysis:
        total = sum(len(text) for text in self.texts())
        if total > MAX_ANSWER_CHARS:
            raise ValueError(f"the answer's prose is {total} characters; at most {MAX_ANSWER_CHARS} in all")
        return self

    def texts(self) -> list[str]:
        """Every piece of prose the draft will show, for the grounding check."""
        return [self.summary, *self.risk_factors, *(r.change for r in self.feedback_responses)]


ANSWER_SCHEMA = {
    "type": "function",
    "function": {
        "name": ANSWER_TOOL,
        "description": ANSWER_DESCRIPTION,
        "parameters": LLMAnalysis.model_json_schema(),
    },
}


def retry_after(exc: BaseException | None) -> float | None:
    """The wait a failed response asks for (`Retry-After` in seconds or as an HTTP date, or
    `retry-after-ms`), capped at `MAX_RETRY_AFTER`; None when it asks for none."""
    import openai

    if not isinstance(exc, openai.APIStatusError):
        return None
    headers = exc.response.headers
    seconds: float | None = None
    if (millis := headers.get("retry-after-ms")) is not None:
        try:
            seconds = float(millis) / 1000
        except ValueError:
            seconds = None
    if seconds is None and (value := headers.get("retry-after")) is not None:
        try:
            seconds = float(value)
        except ValueError:
            try:
                seconds = email.utils.parsedate_to_datetime(value).timestamp() - time.time()
            except (TypeError, ValueError, IndexError):
                seconds = None
    if seconds is None or seconds != seconds:  # absent, or NaN
        return None
    return min(max(seconds, 0.0), MAX_RETRY_AFTER)


_BACKOFF = wait_exponential(multiplier=0.5, max=4)


def _pause(state: RetryCallState) -> float:
    """The server's Retry-After when it gives one; else back off after a quick failure; a request that
    timed out has waited long enough."""
    import openai

    failed = state.outcome.exception() if state.outcome is not None else None
    asked = retry_after(failed)
    if asked is not None:
        return asked
    return 0.0 if isinstance(failed, openai.APITimeoutError) else float(_BACKOFF(state))


def _failure(exc: BaseException) -> str:
    """What went wrong with a request, in one short line."""
    import openai

    if isinstance(exc, openai.APIStatusError):
        return f"HTTP {exc.status_code}"
    if isinstance(exc, openai.APIConnectionError):
        return type(exc).__name__
    return f"not a valid completion: {type(exc).__name__}"


class LLMAnalyst:
    """One OpenAI-compatible chat model (`ports.ChatModel`)."""

    def __init__(
        self,
        *,
        model: str,
        api_key: str,
        base_url: str | None = None,
        timeout: float = 60.0,
        attempts: int = 3,
        notify: Callable[[str], None] | None = None,
        sleep: Callable[[float], None] = time.sleep,
    ) -> None:
        self.name = model
        self.api_key = api_key
        self.base_url = base_url
        self.timeout = timeout
        self.attempts = attempts
        self.notify = notify
        self.sleep = sleep

    @property
    def where(self) -> str:
        """The server, for messages."""
        return self.base_url or "the OpenAI API"

    def _chat(self, tools: list[Any], answer_now: bool) -> Any:
        from langchain_openai import ChatOpenAI

        chat = ChatOpenAI(
            model=self.name,
            api_key=SecretStr(self.api_key),
            base_url=self.base_url,
            temperature=0,
            max_retries=0,  # retried in `respond`, where the attempts are counted and said
            timeout=self.timeout,
        )
        offered = [ANSWER_SCHEMA] if answer_now else [*tools, ANSWER_SCHEMA]
        choice = ANSWER_TOOL if answer_now else "auto"
        return chat.bind_tools(offered, tool_choice=choice, parallel_tool_calls=False)

    def _before_retry(self, state: RetryCallState) -> None:
        if self.notify is not None:
            self.notify(f"waiting for the model (attempt {state.attempt_number + 1} of {self.attempts})")

    def respond(self, messages: list[Any], tools: list[Any], *, answer_now: bool) -> Any:
        """The model's next message (an `AIMessage`), given the conversation and the tools it may call;
        with `answer_now` it may only submit its analysis."""
        chat = self._chat(tools, answer_now)
        retrying = Retrying(
            # The whole turn stays within attempts x (timeout + the longest wait between attempts).
            stop=stop_after_attempt(self.attempts)
            | stop_after_delay(self.attempts * (self.timeout + MAX_RETRY_AFTER)),
            wait=_pause,
            retry=retry_if_exception_type(Exception),
            before_sleep=self._before_retry,
            sleep=self.sleep,
            reraise=True,
        )
        try:
            reply = retrying(self._completion, chat, messages)
        except Exception as exc:
            # Anything short of a completion is the model service failing (the agent loop keeps the
            # conversation valid), so the command stops as an outage and `resume` asks again.
            reason = " ".join(str(exc).split())[:160] or type(exc).__name__
            raise ServiceUnavailable(
                f"the model server at {self.where} did not answer ({_failure(exc)}: {reason}) in "
                f"{self.attempts} attempts of up to {self.timeout:g} s"
            ) from None
        return reply

    @staticmethod
    def _completion(chat: Any, messages: list[Any]) -> Any:
        from langchain_core.messages import AIMessage

        reply = chat.invoke(messages)
        if not isinstance(reply, AIMessage):
            raise TypeError(f"the reply is a {type(reply).__name__}, not an assistant message")
        return reply
