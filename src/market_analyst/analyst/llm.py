"""The chat model behind the LLM analyst (through `langchain-openai`, any OpenAI-compatible server).

`LLMAnalyst.respond` is one model turn of the analyst's agent loop (`nodes/agent.py`): the
conversation so far in, one assistant message out, with the data tools and the `submit_analysis`
tool offered. A request that fails (no connection, a timeout, a 5xx or 429) is sent again with
backoff, `MA_LLM_ATTEMPTS` requests of at most `MA_LLM_TIMEOUT` seconds each; then the turn stops with
`ServiceUnavailable` (nothing that finished is lost; `resume` asks again).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any, Literal

from pydantic import BaseModel, Field, SecretStr
from tenacity import (
    RetryCallState,
    Retrying,
    retry_if_exception,
    stop_after_attempt,
    stop_after_delay,
    wait_exponential,
)

from market_analyst.errors import ServiceUnavailable

ANSWER_TOOL = "submit_analysis"
ANALYST_VERSION = "2"


class FeedbackResponse(BaseModel):
    """What the analyst did about one reviewer feedback item."""

    feedback: str = Field(description="The feedback item, as the reviewer wrote it.")
    change: str = Field(
        min_length=1,
        max_length=500,
        description="What this draft changed in response, or why it changed nothing.",
    )
    acted: bool = Field(description="True if the draft changed because of this item.")


class LLMAnalysis(BaseModel):
    """The analyst's final answer: the draft's judgement fields, nothing else."""

    recommendation: Literal["buy", "hold", "sell"]
    confidence: float = Field(ge=0.0, le=1.0)
    summary: str = Field(min_length=1, max_length=2000)
    risk_factors: list[str] = Field(max_length=10)
    feedback_responses: list[FeedbackResponse] = Field(
        default_factory=list, description="One entry per reviewer feedback item, in order."
    )

    def texts(self) -> list[str]:
        """Every piece of prose the draft will show, for the grounding check."""
        return [self.summary, *self.risk_factors, *(r.change for r in self.feedback_responses)]


ANSWER_SCHEMA = {
    "type": "function",
    "function": {
        "name": ANSWER_TOOL,
        "description": "Submit the final analysis, citing only numbers from the facts or tool results.",
        "parameters": LLMAnalysis.model_json_schema(),
    },
}


def _transient(exc: BaseException) -> bool:
    """A request failure worth sending again: no connection, a timeout, a server error or a 429."""
    import openai

    if isinstance(exc, openai.APIConnectionError):  # includes timeouts
        return True
    status = exc.status_code if isinstance(exc, openai.APIStatusError) else None
    return status is not None and (status >= 500 or status in (408, 429))


_BACKOFF = wait_exponential(multiplier=0.5, max=4)


def _pause(state: RetryCallState) -> float:
    """Back off after a quick failure; a request that timed out has waited long enough."""
    import openai

    failed = state.outcome.exception() if state.outcome is not None else None
    return 0.0 if isinstance(failed, openai.APITimeoutError) else float(_BACKOFF(state))


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
            # The whole turn stays within attempts x timeout: no pause after a request that timed out.
            stop=stop_after_attempt(self.attempts) | stop_after_delay(self.attempts * self.timeout),
            wait=_pause,
            retry=retry_if_exception(_transient),
            before_sleep=self._before_retry,
            sleep=self.sleep,
            reraise=True,
        )
        try:
            return retrying(chat.invoke, messages)
        except Exception as exc:
            if not _transient(exc):
                raise
            reason = " ".join(str(exc).split())[:160] or type(exc).__name__
            raise ServiceUnavailable(
                f"the model server at {self.where} did not answer ({type(exc).__name__}: {reason}) in "
                f"{self.attempts} attempts of up to {self.timeout:g} s"
            ) from None
