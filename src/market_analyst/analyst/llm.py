"""The LLM analyst: a chat model (through `langchain-openai`) writes the recommendation and the
prose, with the computed figures passed in as facts.

The model's answer is structured output in the draft's own fields. Every number in its text must be
one of the facts' numbers: an answer that cites anything else is refused and asked for again, and the
run fails with one clear line if no attempt passes. Transport errors are retried with backoff.
"""

from __future__ import annotations

import json
import re
import time
from collections.abc import Callable
from typing import Any, Literal

from pydantic import BaseModel, Field, SecretStr, ValidationError
from tenacity import Retrying, retry_if_exception, stop_after_attempt, wait_exponential

from market_analyst.analyst import rules
from market_analyst.errors import UserError
from market_analyst.state import Profile

ATTEMPTS = 3
BACKOFF_SECONDS = 0.5
_NUMBER = re.compile(r"\d+(?:\.\d+)?")


class LLMAnalysis(BaseModel):
    """What the model must return: the draft's judgement fields, nothing else."""

    recommendation: Literal["buy", "hold", "sell"]
    confidence: float = Field(ge=0.0, le=1.0)
    summary: str = Field(min_length=1, max_length=2000)
    risk_factors: list[str] = Field(max_length=10)


def _fmt(name: str, value: Any) -> str:
    if isinstance(value, float) and (
        name.startswith(("return", "volatility", "max_drawdown", "from_")) or name == "relative_return"
    ):
        return f"{value * 100:+.1f}%"
    return str(value)


def facts_for(figures: dict[str, Any], profile: Profile, framing: str) -> list[str]:
    """The facts the model may cite, one line each, numbers written as the report writes them."""
    lines = [f"{name}: {_fmt(name, value)}" for name, value in figures.items() if name != "benchmark"]
    benchmark = figures.get("benchmark")
    if isinstance(benchmark, dict):
        lines += [f"benchmark_{k}: {_fmt(k, v)}" for k, v in benchmark.items()]
    else:
        lines.append("benchmark: not available (no overlapping dates)")
    lines.append(f"profile: {profile.risk_tolerance} risk tolerance, {profile.horizon} horizon")
    lines.append(f"rules: {framing}")
    return lines


def allowed_numbers(facts: list[str]) -> set[str]:
    """Every number that appears in the facts, in the forms a writer may use (no sign, no %)."""
    found = set()
    for line in facts:
        for number in _NUMBER.findall(line):
            found.add(number)
            if "." in number:
                found.add(number.rstrip("0").rstrip("."))
    return found


def unsupported_numbers(answer: LLMAnalysis, allowed: set[str]) -> list[str]:
    """Numbers in the answer's text that no fact contains."""
    text = " ".join([answer.summary, *answer.risk_factors])
    out = []
    for number in _NUMBER.findall(text):
        plain = number.rstrip("0").rstrip(".") if "." in number else number
        if number not in allowed and plain not in allowed:
            out.append(number)
    return out


SYSTEM = (
    "You are a careful equity analyst. Judge the stock from the facts given, for the investor profile "
    "given. Cite numbers only as they appear in the facts; write no other number (no years, no "
    "counts, no figures of your own). Return recommendation (buy, hold or sell), confidence between "
    "0 and 1, a summary of a few sentences and up to ten short risk factors."
)


class LLMAnalyst:
    """Asks an OpenAI-compatible chat model; `invoke` is injectable for tests of the checks."""

    def __init__(
        self,
        *,
        model: str,
        api_key: str,
        base_url: str | None = None,
        sleep: Callable[[float], None] = time.sleep,
    ) -> None:
        self.model = model
        self.api_key = api_key
        self.base_url = base_url
        self.sleep = sleep

    def _structured(self) -> Any:
        from langchain_openai import ChatOpenAI

        chat = ChatOpenAI(
            model=self.model,
            api_key=SecretStr(self.api_key),
            base_url=self.base_url,
            temperature=0,
            max_retries=0,  # retried below, where the attempts are counted and said
            timeout=60,
        )
        return chat.with_structured_output(LLMAnalysis, method="function_calling")

    def _ask(self, structured: Any, messages: list[tuple[str, str]]) -> LLMAnalysis:
        """One answer from the model; a failed request (no connection, a timeout, a 5xx or 429) is
        sent again with exponential backoff, up to `ATTEMPTS` requests in all."""
        retrying = Retrying(
            stop=stop_after_attempt(ATTEMPTS),
            wait=wait_exponential(multiplier=BACKOFF_SECONDS, max=8),
            retry=retry_if_exception(_transient),
            sleep=self.sleep,
            reraise=True,
        )
        answer = retrying(structured.invoke, messages)
        return answer if isinstance(answer, LLMAnalysis) else LLMAnalysis.model_validate(answer)

    def _prompt(self, ticker: str, facts: list[str], feedback: list[str]) -> list[tuple[str, str]]:
        asked = f"Ticker: {ticker}\nFacts:\n" + "\n".join(f"- {f}" for f in facts)
        if feedback:
            asked += "\nReviewer feedback to address:\n" + "\n".join(f"- {x}" for x in feedback)
        return [("system", SYSTEM), ("human", asked)]

    def analyse(
        self, ticker: str, figures: dict[str, Any], profile: Profile, feedback: list[str]
    ) -> dict[str, Any]:
        """Recommendation, confidence, summary and risk factors from the model, checked against the facts.

        An answer that does not fit the schema, or cites a number no fact contains, is asked for again
        (up to `ATTEMPTS` answers); the run then stops with one line and can be resumed."""
        if not self.api_key:
            raise UserError("the LLM analyst needs OPENAI_API_KEY (and OPENAI_BASE_URL for another server)")
        baseline = rules.analyse(figures, profile)
        facts = facts_for(figures, profile, baseline["framing"])
        allowed = allowed_numbers(facts)
        messages = self._prompt(ticker, facts, feedback)
        structured = self._structured()
        problem = ""
        for _ in range(ATTEMPTS):
            try:
                answer = self._ask(structured, messages)
            except (ValidationError, ValueError) as exc:
                problem = f"the answer did not fit the draft schema ({' '.join(str(exc).split())[:120]})"
                continue
            except Exception as exc:  # the transport failed ATTEMPTS times over
                problem = f"{type(exc).__name__}: {' '.join(str(exc).split())[:160]}"
                break
            unsupported = unsupported_numbers(answer, allowed)
            if not unsupported:
                return {
                    "recommendation": answer.recommendation,
                    "confidence": round(answer.confidence, 2),
                    "score": baseline["score"],
                    "summary": answer.summary,
                    "risk_factors": list(answer.risk_factors),
                    "analyst": {"kind": "llm", "name": self.model, "version": "1"},
                    "framing": baseline["framing"],
                    "facts": facts,
                }
            problem = f"the answer cited numbers that are not in the facts: {', '.join(unsupported[:5])}"
            retry = f"Your answer cited {', '.join(unsupported[:5])}, which no fact contains. "
            messages = [
                *messages,
                ("ai", json.dumps(answer.model_dump())),
                ("human", retry + "Answer again citing only numbers from the facts."),
            ]
        where = self.base_url or "the OpenAI API"
        raise UserError(
            f"the LLM analyst ({self.model} at {where}) gave no usable answer in {ATTEMPTS} tries: {problem}"
        )


def _transient(exc: BaseException) -> bool:
    """A request failure worth sending again: no connection, a timeout, a server error or a 429."""
    import openai

    if isinstance(exc, openai.APIConnectionError):  # includes timeouts
        return True
    status = exc.status_code if isinstance(exc, openai.APIStatusError) else None
    return status is not None and (status >= 500 or status in (408, 429))
