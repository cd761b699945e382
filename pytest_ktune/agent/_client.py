"""The model: any OpenAI-compatible chat endpoint, through the official ``openai`` client.

The client calls tools (function calling), checks the arguments of every tool call against the
tool's JSON schema, retries 429s and 5xx answers with exponential backoff (honouring
``Retry-After``), gives each request a deadline, and keeps a per-run budget of tokens and money.
Every request and answer goes to the run's transcript, with secrets redacted.
"""

from __future__ import annotations

import json
import os
import re
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from pytest_ktune.agent._transcript import Transcript
from pytest_ktune.core.errors import KtuneError
from pytest_ktune.core.redact import Redactor


class AgentError(KtuneError):
    """The agent stage could not go on: the model, its endpoint or a budget stopped it."""


class ModelError(AgentError):
    """The endpoint failed: a timeout, too many 429s or 5xx answers, a refused key."""


class BudgetError(AgentError):
    """A budget of the run (tokens, cost, iterations, wall time) is spent."""


DEFAULT_TOKENS = 200_000


@dataclass(frozen=True)
class ModelSettings:
    """Which model to ask, where, and how much one run may spend."""

    model: str
    base_url: str | None = None
    api_key: str | None = field(default=None, repr=False)
    timeout_s: float = 120.0
    max_retries: int = 4
    backoff_s: float = 1.0
    max_backoff_s: float = 30.0
    token_budget: int = DEFAULT_TOKENS
    cost_budget: float | None = None  # in the currency of the prices; None: no limit
    price_in_per_1k: float = 0.0  # 0: unknown, so the cost is not known either
    price_out_per_1k: float = 0.0
    temperature: float | None = None

    @classmethod
    def from_env(cls, model: str | None = None, *, env: Mapping[str, str] | None = None,
                 **overrides: Any) -> ModelSettings | None:
        """The settings from ``--ktune-model`` (or ``KTUNE_MODEL``), ``OPENAI_BASE_URL``, ``OPENAI_API_KEY``,
        ``KTUNE_AGENT_TIMEOUT``, ``KTUNE_AGENT_TOKENS``, ``KTUNE_AGENT_COST`` and ``KTUNE_PRICE_PER_1K``
        ("input,output"); None where no model is named: the agent is off."""
        env = os.environ if env is None else env
        name = model or env.get("KTUNE_MODEL", "").strip()
        if not name:
            return None
        values: dict[str, Any] = {"model": name, "base_url": env.get("OPENAI_BASE_URL") or None,
                                  "api_key": env.get("OPENAI_API_KEY") or None}
        for var, attr, kind in (("KTUNE_AGENT_TIMEOUT", "timeout_s", float),
                                ("KTUNE_AGENT_TOKENS", "token_budget", int),
                                ("KTUNE_AGENT_COST", "cost_budget", float)):
            raw = env.get(var, "").strip()
            if raw:
                try:
                    values[attr] = kind(raw)
                except ValueError:
                    raise AgentError(f"{var}={raw!r} is not a number",
                                     hint=f"set {var} to a number, or unset it") from None
        price = env.get("KTUNE_PRICE_PER_1K", "").strip()
        if price:
            try:
                parts = [float(p) for p in price.split(",")]
            except ValueError:
                parts = []
            if len(parts) not in (1, 2):
                raise AgentError(f"KTUNE_PRICE_PER_1K={price!r} is not 'input,output' prices",
                                 hint="e.g. KTUNE_PRICE_PER_1K=0.5,1.5 (per 1,000 tokens)")
            values["price_in_per_1k"], values["price_out_per_1k"] = parts[0], parts[-1]
        values.update({k: v for k, v in overrides.items() if v is not None})
        settings = cls(**values)
        settings.check()
        return settings

    @property
    def priced(self) -> bool:
        return self.price_in_per_1k > 0 or self.price_out_per_1k > 0

    def check(self) -> None:
        if self.timeout_s <= 0:
            raise AgentError("the model's request timeout must be positive", hint="e.g. KTUNE_AGENT_TIMEOUT=120")
        if self.token_budget < 1:
            raise AgentError(f"a token budget of {self.token_budget} allows no request",
                             hint="set KTUNE_AGENT_TOKENS to 1 or more")
        if self.cost_budget is not None and not self.priced:
            raise AgentError("a cost budget was given, but no price per 1k tokens, so the cost cannot be counted",
                             hint="set KTUNE_PRICE_PER_1K=input,output, or drop KTUNE_AGENT_COST")
        if not self.api_key and not self.base_url:
            raise AgentError(f"model {self.model!r} is named but neither OPENAI_API_KEY nor OPENAI_BASE_URL is set",
                             hint="export OPENAI_API_KEY (and OPENAI_BASE_URL for another OpenAI-compatible "
                                  "endpoint), or leave --ktune-model unset for the rule-based templater")


# -- tool schemas and their validation ----------------------------------------------------


@dataclass(frozen=True)
class Tool:
    """A function the model may call: its name, what it does, and the JSON schema of its arguments."""

    name: str
    description: str
    parameters: Mapping[str, Any]

    def spec(self) -> dict[str, Any]:
        return {"type": "function", "function": {"name": self.name, "description": self.description,
                                                 "parameters": dict(self.parameters)}}


def validate(value: Any, schema: Mapping[str, Any], path: str = "arguments") -> list[str]:
    """What is wrong with ``value`` against ``schema`` (the JSON-schema subset our tools use: type,
    properties, required, additionalProperties, items, enum, minimum, maximum, minItems, maxItems);
    empty when it fits."""
    errors: list[str] = []
    kind = schema.get("type")
    kinds = kind if isinstance(kind, list) else [kind] if kind else []
    if kinds and not any(_is_type(value, k) for k in kinds):
        return [f"{path} must be {' or '.join(kinds)}, not {_json_type(value)}"]
    if "enum" in schema and value not in schema["enum"]:
        errors.append(f"{path} must be one of {', '.join(json.dumps(v) for v in schema['enum'])}, "
                      f"not {json.dumps(value)}")
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        if "minimum" in schema and value < schema["minimum"]:
            errors.append(f"{path} must be at least {schema['minimum']}, not {value}")
        if "maximum" in schema and value > schema["maximum"]:
            errors.append(f"{path} must be at most {schema['maximum']}, not {value}")
    if isinstance(value, dict):
        props: Mapping[str, Any] = schema.get("properties", {})
        errors.extend(f"{path} lacks the required field {name!r}" for name in schema.get("required", ())
                      if name not in value)
        extra = schema.get("additionalProperties", True)
        for name, item in value.items():
            if name in props:
                errors.extend(validate(item, props[name], f"{path}.{name}"))
            elif extra is False:
                errors.append(f"{path} has an unknown field {name!r} (known: {', '.join(props) or 'none'})")
            elif isinstance(extra, dict):
                errors.extend(validate(item, extra, f"{path}.{name}"))
    if isinstance(value, list):
        if "minItems" in schema and len(value) < schema["minItems"]:
            errors.append(f"{path} needs at least {schema['minItems']} item(s), has {len(value)}")
        if "maxItems" in schema and len(value) > schema["maxItems"]:
            errors.append(f"{path} allows at most {schema['maxItems']} item(s), has {len(value)}")
        if "items" in schema:
            for i, item in enumerate(value):
                errors.extend(validate(item, schema["items"], f"{path}[{i}]"))
    return errors


_TYPES: dict[str, Callable[[Any], bool]] = {
    "object": lambda v: isinstance(v, dict),
    "array": lambda v: isinstance(v, list),
    "string": lambda v: isinstance(v, str),
    "boolean": lambda v: isinstance(v, bool),
    "integer": lambda v: isinstance(v, int) and not isinstance(v, bool),
    "number": lambda v: isinstance(v, (int, float)) and not isinstance(v, bool),
    "null": lambda v: v is None,
}


def _is_type(value: Any, kind: str) -> bool:
    check = _TYPES.get(kind)
    return check(value) if check else True


def _json_type(value: Any) -> str:
    for name in ("null", "boolean", "integer", "number", "string", "array", "object"):
        if _TYPES[name](value):
            return name
    return type(value).__name__


# -- one answer -----------------------------------------------------------------------------


@dataclass(frozen=True)
class ToolCall:
    """One tool call of an answer: its arguments when they parsed and fit the schema, else the error."""

    id: str
    name: str
    raw: str
    arguments: Mapping[str, Any] | None
    error: str = ""


@dataclass(frozen=True)
class Reply:
    """One answer of the model."""

    text: str
    tool_calls: tuple[ToolCall, ...]
    refusal: str
    message: Mapping[str, Any]  # the assistant message, as it goes back into the conversation
    tokens: int

    @property
    def empty(self) -> bool:
        return not self.text.strip() and not self.tool_calls and not self.refusal


_REFUSAL = re.compile(r"^\W*(i'?m sorry|i am sorry|sorry,|i (?:can ?not|can't|won't|will not|am unable|'m unable)|"
                      r"i must decline|as an ai|unfortunately,? i (?:can ?not|can't))", re.IGNORECASE)


def looks_like_refusal(text: str) -> bool:
    """A plain-text answer that declines the task (no tool call came with it)."""
    return bool(_REFUSAL.search(text.strip()))


def parse_tool_call(call_id: str, name: str, raw: str, tools: Mapping[str, Tool],
                    redactor: Redactor | None = None) -> ToolCall:
    """A tool call with its arguments parsed and checked, or the error the model must fix. With
    ``redactor``, every string of the arguments is redacted before anything else sees it."""
    if redactor is not None:
        name = redactor.text(name)
    tool = tools.get(name)
    if redactor is not None and tool is not None:
        try:
            parsed = json.loads(raw) if raw.strip() else {}
        except (ValueError, RecursionError):
            raw = redactor.text(raw)
        else:
            raw = json.dumps(redactor.strings(parsed))
    elif redactor is not None:
        raw = redactor.text(raw)
    if tool is None:
        return ToolCall(call_id, name, raw, None,
                        f"there is no tool {name!r}; the tools are {', '.join(sorted(tools))}")
    try:
        args = json.loads(raw) if raw.strip() else {}
    except json.JSONDecodeError as exc:
        return ToolCall(call_id, name, raw, None,
                        f"malformed JSON in the arguments of {name}: {exc.msg} at line {exc.lineno}, column "
                        f"{exc.colno}; send the arguments as one JSON object")
    except (ValueError, RecursionError) as exc:  # an integer of thousands of digits, nesting past the parser
        return ToolCall(call_id, name, raw, None, f"unusable JSON in the arguments of {name}: "
                                                  f"{str(exc)[:200]}; send plain numbers and shallow objects")
    problems = validate(args, tool.parameters)
    if problems:
        return ToolCall(call_id, name, raw, None,
                        f"wrong arguments for {name}: {'; '.join(problems[:5])}"
                        + (f" (and {len(problems) - 5} more)" if len(problems) > 5 else ""))
    return ToolCall(call_id, name, raw, args)


# -- the client -------------------------------------------------------------------------------


@dataclass
class Usage:
    """What the run has spent so far."""

    prompt_tokens: int = 0
    completion_tokens: int = 0
    requests: int = 0
    estimated: bool = False  # an answer came without `usage`: its tokens were estimated from its length

    @property
    def tokens(self) -> int:
        return self.prompt_tokens + self.completion_tokens

    def cost(self, s: ModelSettings) -> float | None:
        if not s.priced:
            return None
        return (self.prompt_tokens * s.price_in_per_1k + self.completion_tokens * s.price_out_per_1k) / 1000

    def describe(self, s: ModelSettings) -> str:
        cost = self.cost(s)
        money = f"cost {cost:.4f}" if cost is not None else "cost unknown (no price set: KTUNE_PRICE_PER_1K)"
        return (f"{self.requests} request(s), {self.tokens} tokens{' (partly estimated)' if self.estimated else ''}"
                f", {money}")


class ModelClient:
    """Asks the model, with retries, a deadline per request, budgets, and a transcript."""

    def __init__(self, settings: ModelSettings, transcript: Transcript, *, sleep: Callable[[float], None] = time.sleep,
                 client: Any = None, budget: Any = None) -> None:
        settings.check()
        self.settings = settings
        self.transcript = transcript
        self.usage = Usage()
        self._sleep = sleep
        self._client = client
        self.budget = budget  # the run's Budget (``_budget``): request deadlines and retries stay within it
        transcript.add_secret(settings.api_key)

    @property
    def redactor(self) -> Redactor:
        """The run's redactor: everything the model sends passes through it before it is used."""
        return self.transcript.redactor

    def _openai(self) -> Any:
        if self._client is None:
            try:
                import openai
            except ImportError:
                raise AgentError("the agent needs the openai package", hint="pip install openai") from None
            # Retries are ours (to honour Retry-After, count them in the transcript and bound them).
            self._client = openai.OpenAI(api_key=self.settings.api_key or "no-key", base_url=self.settings.base_url,
                                         timeout=self.settings.timeout_s, max_retries=0)
        return self._client

    def check_budget(self) -> None:
        s = self.settings
        if self.usage.tokens >= s.token_budget:
            raise BudgetError(f"the token budget of {s.token_budget} is spent ({self.usage.describe(s)})",
                              hint="raise it with KTUNE_AGENT_TOKENS, or give the "
                                   "model fewer iterations")
        cost = self.usage.cost(s)
        if s.cost_budget is not None and cost is not None and cost >= s.cost_budget:
            raise BudgetError(f"the cost budget of {s.cost_budget:g} is spent ({self.usage.describe(s)})",
                              hint="raise it with KTUNE_AGENT_COST, or use a cheaper model")

    def ask(self, messages: Sequence[Mapping[str, Any]], tools: Sequence[Tool]) -> Reply:
        """One answer to ``messages``; raises ModelError when the endpoint fails past its retries,
        BudgetError when the run's budget is spent."""
        import openai

        self.check_budget()
        if self.budget is not None:
            self.budget.check()
        s = self.settings
        request: dict[str, Any] = {"model": s.model, "messages": [dict(m) for m in messages],
                   "tools": [t.spec() for t in tools], "tool_choice": "auto"}
        if s.temperature is not None:
            request["temperature"] = s.temperature
        self.transcript.write("request", {"url": s.base_url or "default", **request})
        client = self._openai()
        attempt = 0
        while True:
            attempt += 1
            started = time.monotonic()
            deadline = self.budget.cap(s.timeout_s) if self.budget is not None else s.timeout_s
            try:
                response = client.chat.completions.create(**request, timeout=deadline)
                break
            except openai.APITimeoutError:
                why, wait = f"no answer within the {s.timeout_s:g} s request timeout", None
                retry = True
            except openai.APIStatusError as exc:
                status = exc.status_code
                why = f"HTTP {status}: {self.redactor.text(_status_text(exc))}"
                retry = status == 429 or status >= 500
                wait = _retry_after(exc)
                if not retry:
                    self.transcript.write("error", {"attempt": attempt, "error": why})
                    raise ModelError(f"the model endpoint refused the request ({why})", where=s.base_url or "",
                                     hint=_status_hint(status)) from None
            except openai.APIConnectionError as exc:
                why, wait, retry = f"cannot connect: {self.redactor.text(str(exc))}", None, True
            except (ValueError, RecursionError, MemoryError) as exc:  # an answer that is no usable JSON
                why, wait, retry = f"an unusable answer: {self.redactor.text(str(exc))[:200]}", None, True
            self.transcript.write("error", {"attempt": attempt, "error": why,
                                            "seconds": round(time.monotonic() - started, 3)})
            if attempt > s.max_retries:
                raise ModelError(f"the model endpoint failed {attempt} time(s); last: {why}",
                                 where=s.base_url or "",
                                 hint="check the endpoint and model name; raise KTUNE_AGENT_TIMEOUT for a slow "
                                      "model" if "timeout" in why else "check the endpoint, or retry later")
            delay = min(s.max_backoff_s, s.backoff_s * 2 ** (attempt - 1))
            if wait is not None:
                delay = min(max(wait, 0.0), max(s.max_backoff_s, 0.0))
            if self.budget is not None:
                self.budget.check()
                delay = min(delay, max(self.budget.left_s(), 0.0))
            self.transcript.write("retry", {"attempt": attempt, "sleep_s": round(delay, 3)})
            self._sleep(delay)
        return self._reply(response, tools)

    def _reply(self, response: Any, tools: Sequence[Tool]) -> Reply:
        raw = response.model_dump() if hasattr(response, "model_dump") else dict(response)
        self.transcript.write("response", raw)
        self.usage.requests += 1
        usage = getattr(response, "usage", None)
        choices = getattr(response, "choices", None) or []
        msg = choices[0].message if choices else None
        text = self.redactor.text(str((getattr(msg, "content", None) or "") if msg is not None else ""))
        refusal = self.redactor.text(str((getattr(msg, "refusal", None) or "") if msg is not None else ""))
        by_name = {t.name: t for t in tools}
        calls = []
        message: dict[str, Any] = {"role": "assistant", "content": text or None}
        raw_calls = []
        for i, call in enumerate(getattr(msg, "tool_calls", None) or []):
            fn = getattr(call, "function", None)
            name = getattr(fn, "name", "") or ""
            args = getattr(fn, "arguments", "") or ""
            call_id = getattr(call, "id", None) or f"call_{self.usage.requests}_{i}"
            parsed = parse_tool_call(str(call_id), str(name), str(args), by_name, self.redactor)
            calls.append(parsed)
            raw_calls.append({"id": parsed.id, "type": "function",
                              "function": {"name": parsed.name, "arguments": parsed.raw}})
        if raw_calls:
            message["tool_calls"] = raw_calls
        if usage is not None and getattr(usage, "total_tokens", None) is not None:
            prompt = int(getattr(usage, "prompt_tokens", 0) or 0)
            completion = int(getattr(usage, "completion_tokens", 0) or 0)
            if prompt + completion == 0:
                completion = int(usage.total_tokens)
            tokens = prompt + completion
        else:  # no usage reported: about four characters a token, counted as output
            prompt, completion = 0, max(1, len(json.dumps(raw)) // 4)
            tokens = completion
            self.usage.estimated = True
        self.usage.prompt_tokens += prompt
        self.usage.completion_tokens += completion
        return Reply(text=text, tool_calls=tuple(calls), refusal=refusal, message=message, tokens=tokens)


def _retry_after(exc: Any) -> float | None:
    headers = getattr(getattr(exc, "response", None), "headers", None) or {}
    value = headers.get("retry-after") if hasattr(headers, "get") else None
    if value is None:
        return None
    try:
        return float(value)
    except ValueError:
        from email.utils import parsedate_to_datetime

        try:
            return parsedate_to_datetime(value).timestamp() - time.time()
        except (TypeError, ValueError):
            return None


def _status_text(exc: Any) -> str:
    body = getattr(exc, "body", None)
    if isinstance(body, dict):
        err = body.get("error", body)
        if isinstance(err, dict) and err.get("message"):
            return str(err["message"])[:300]
    return str(getattr(exc, "message", exc))[:300]


def _status_hint(status: int) -> str:
    if status in (401, 403):
        return "check OPENAI_API_KEY (and OPENAI_BASE_URL: the key must belong to that endpoint)"
    if status == 404:
        return "check the model name (--ktune-model or KTUNE_MODEL) and OPENAI_BASE_URL"
    return "check the request in the transcript under .ktune/agent/"
