"""The X^R agent roles: which prompt file each uses, what JSON it must return, and how a reply is
parsed, validated, repaired or asked for again.

Prompt wording lives in ``cir/prompts/<role>.txt`` (``string.Template`` placeholders, so JSON braces
need no escaping). Models often wrap JSON in prose or code fences, use Python literals or leave a
trailing comma; :func:`extract_json` repairs those. A reply that still does not match the role's
schema is sent back to the model with the validation error (up to ``json_attempts`` calls); after
that the call fails with a :class:`BackendError` that the run loop records as the item's failure.

Under ``xr_json_parsing=official`` the replies of the official prompts are read as the official X^R
code reads them instead (:func:`official_json`: its regular expressions, one ``json_repair`` pass,
never asked again; formats ending in ``+json_repair``).
"""

from __future__ import annotations

import ast
import contextlib
import dataclasses
import json
import re
from collections import Counter
from dataclasses import asdict, dataclass
from functools import cache, partial
from importlib import resources
from pathlib import Path
from string import Template
from typing import Any

from unirag.errors import ConfigError, MalformedResponseError
from unirag.messages import ImagePart, Message, TextPart

_STR = {"type": "string"}
_BOOL = {"type": "boolean"}
#: the reply of both judges (A_t^q, A_v^q): one boolean per statement
_ANSWERS = {"type": "object", "required": ["answers"], "properties": {"answers": {"type": "array", "items": _BOOL}}}


@dataclass(frozen=True)
class AgentRole:
    name: str
    needs_image: bool
    schema: dict[str, Any] | None  # None: plain-text reply (the caption agent)
    summary: str


ROLES: dict[str, AgentRole] = {r.name: r for r in [
    AgentRole("caption", True, None, "A_c: caption C_a of every candidate and C_r of the reference"),
    AgentRole("text_imagination", False, {
        "type": "object", "required": ["target_caption", "modifications"],
        "properties": {"target_caption": _STR, "modifications": {"type": "array", "items": _STR}},
    }, "A_t^i: (C_r, T_m) -> target caption C_t and explicit modifications M_t"),
    AgentRole("vision_imagination", True, {
        "type": "object", "required": ["target_caption", "attributes"],
        "properties": {"target_caption": _STR, "attributes": {"type": "array", "items": {
            "type": "object", "required": ["attribute", "present"],
            "properties": {"attribute": _STR, "present": _BOOL}}}},
    }, "A_v^i: (I_r, T_m) -> target caption C_v and attribute presence/absence M_v"),
    AgentRole("question", False, {
        "type": "object", "required": ["statements"],
        "properties": {"statements": {"type": "array", "minItems": 1, "items": {
            "type": "object", "required": ["statement", "answer"],
            "properties": {"statement": _STR, "answer": _BOOL}}}},
    }, "A^q: (T_m, M_t, M_v) -> true/false statements with expected answers"),
    AgentRole("text_question", False, _ANSWERS, "A_t^q: judges each statement against the candidate caption C_a"),
    AgentRole("vision_question", True, _ANSWERS, "A_v^q: judges each statement on the candidate image I_a"),
]}


class MalformedOutput(MalformedResponseError):
    """A reply that is not the JSON the role's schema asks for (message says what is wrong)."""


@cache
def template_text(role: str) -> str:
    return resources.files("unirag.cir").joinpath("prompts", f"{role}.txt").read_text(encoding="utf-8")


def build_messages(role: str, image: Path | None = None, *, template: str | None = None, text: str | None = None,
                   **values: Any) -> list[Message]:
    """One user message: the image first (when the role sees one), then the prompt.

    The prompt is ``text`` when given (an official prompt, already filled in), else the packaged
    ``template`` (default: the role's own) rendered with ``values``.
    """
    spec = ROLES[role]
    if spec.needs_image and image is None:
        raise ValueError(f"agent role {role!r} needs an image")
    if text is None:
        try:
            text = Template(template_text(template or role)).substitute({k: str(v) for k, v in values.items()})
        except KeyError as e:
            raise ConfigError(f"prompt template for {template or role!r} needs the value {e}") from None
    parts: list = [ImagePart(path=Path(image), label=Path(image).name)] if spec.needs_image else []
    return [Message("user", [*parts, TextPart(text)])]


# -- parsing and repair ----------------------------------------------------------------------------
_FENCE = re.compile(r"```(?:json|JSON)?\s*(.*?)```", re.S)
_TRAILING_COMMA = re.compile(r",\s*([}\]])")


def _first_object(text: str) -> str | None:
    """The first balanced {...} in ``text`` (string-aware), or None."""
    start = text.find("{")
    while start != -1:
        depth, in_str, esc = 0, None, False
        for i in range(start, len(text)):
            ch = text[i]
            if in_str:
                if esc:
                    esc = False
                elif ch == "\\":
                    esc = True
                elif ch == in_str:
                    in_str = None
            elif ch in "\"'":
                in_str = ch
            elif ch == "{":
                depth += 1
            elif ch == "}":
                depth -= 1
                if depth == 0:
                    return text[start:i + 1]
        start = text.find("{", start + 1)
    return None


def extract_json(text: str) -> tuple[Any, bool]:
    """Parse a JSON object out of a model reply. Returns (object, repaired?)."""
    stripped = text.strip()
    with contextlib.suppress(json.JSONDecodeError):
        return json.loads(stripped), False
    fenced = _FENCE.search(stripped)
    inner = fenced.group(1) if fenced else stripped
    for c in filter(None, ([inner] if fenced else []) + [_first_object(inner)]):  # the fence, its first {...}
        for attempt in (c, _TRAILING_COMMA.sub(r"\1", c)):
            with contextlib.suppress(json.JSONDecodeError):
                return json.loads(attempt), True
            with contextlib.suppress(ValueError, SyntaxError, MemoryError, RecursionError):
                value = ast.literal_eval(attempt)  # Python literals: single quotes, True/False/None
                if isinstance(value, dict):
                    return value, True
    raise MalformedOutput("no JSON object found in the reply")


_BOOL_WORDS = {"true": True, "yes": True, "false": False, "no": False}


def validate(value: Any, schema: dict[str, Any], where: str = "$") -> Any:
    """Check ``value`` against a small JSON-schema subset; coerce "true"/"yes" strings to booleans."""
    kind = schema.get("type")
    if kind == "object":
        if not isinstance(value, dict):
            raise MalformedOutput(f"{where}: expected an object")
        for key in schema.get("required", []):
            if key not in value:
                raise MalformedOutput(f"{where}: missing field '{key}'")
        return {k: validate(v, schema["properties"][k], f"{where}.{k}") if k in schema.get("properties", {})
                else v for k, v in value.items()}
    if kind == "array":
        if not isinstance(value, list):
            raise MalformedOutput(f"{where}: expected a list")
        if len(value) < schema.get("minItems", 0):
            raise MalformedOutput(f"{where}: expected at least {schema['minItems']} item(s)")
        return [validate(v, schema["items"], f"{where}[{i}]") for i, v in enumerate(value)]
    if kind == "string":
        if not isinstance(value, str) or not value.strip():
            raise MalformedOutput(f"{where}: expected a non-empty string")
        return value.strip()
    if kind == "boolean":
        if isinstance(value, bool):
            return value
        if isinstance(value, str) and value.strip().lower() in _BOOL_WORDS:
            return _BOOL_WORDS[value.strip().lower()]
        raise MalformedOutput(f"{where}: expected true or false")
    return value


# -- the official code's own reading of its JSON replies (xr_json_parsing=official) -------------------
_OFFICIAL_FENCE = re.compile(r"```json\s*([\s\S]*?)\s*```", re.DOTALL)
_OFFICIAL_BRACES = re.compile(r"(\{[\s\S]*?\})", re.DOTALL)      # the first '{' to the FIRST '}' after it
_OFFICIAL_BRACES_V2 = re.compile(r"(\{[\s\S]*\})", re.DOTALL)    # cir-v2: the first '{' to the last '}'


def official_json(text: str, v2: bool = False) -> Any:
    """The JSON of an official reasoner reply read as the official code reads it, or None.

    01yzzyu/xr.github.io XR/xr.py:295-303 (stage1_reason) and :689-697 (stage2_verify): the
    first ```json fence, else the first ``{`` up to the first ``}`` after it (a non-greedy match, so
    a nested object is cut at its first closing brace and left to the repair), then ONE
    ``json.loads(repair_json(...))``. None: nothing matched, or the repaired text is still not JSON.

    ``v2``: the cir-v2 reasoner reply read as the official code reads it (XR/xr.py:341-357): the whole
    stripped reply through one repair pass; only if that raises, the ```json fence or the first
    ``{`` to the LAST ``}``, repaired once. Kept only when it is a non-empty object, else None.
    """
    from json_repair import repair_json  # one pass of the json_repair package, as the official code

    t = text.strip() if v2 else text
    if v2:
        with contextlib.suppress(ValueError):
            obj = json.loads(repair_json(t))
            return obj if obj and isinstance(obj, dict) else None
    m = _OFFICIAL_FENCE.search(t) or (_OFFICIAL_BRACES_V2 if v2 else _OFFICIAL_BRACES).search(t)
    try:
        obj = None if m is None else json.loads(repair_json(m.group(1)))
    except ValueError:  # json.JSONDecodeError
        return None
    return obj if not v2 or (obj and isinstance(obj, dict)) else None


def _reasoner_fields(obj: dict[str, Any]) -> dict[str, Any]:
    """The official stage-1 reasoner's JSON: ``step1`` = [[kind, content], ...] (atomic instructions),
    ``step2`` = target descriptions."""
    step1 = [[str(e[0]), str(e[1])] for e in obj.get("step1") or [] if isinstance(e, (list, tuple)) and len(e) == 2]
    step2 = [str(d).strip() for d in obj.get("step2") or [] if isinstance(d, str) and d.strip()]
    return {"step1": step1, "step2": step2}


def _question_fields(obj: dict[str, Any]) -> dict[str, Any]:
    """The official stage-2 reasoner's JSON: ``step2`` = [[question, expected answer], ...]; entries that
    are not pairs are dropped, as the official code does. Answers are kept as written (``answer_raw``)."""
    statements = []
    for e in obj.get("step2") or []:
        if isinstance(e, (list, tuple)) and len(e) == 2 and isinstance(e[0], str) and e[0].strip():
            raw = e[1]
            answer = raw if isinstance(raw, bool) else _BOOL_WORDS.get(str(raw).strip().lower(), bool(raw))
            statements.append({"statement": e[0].strip(), "answer": answer, "answer_raw": raw})
    return {"statements": statements}


#: The official prompts' JSON replies: what is kept of the reply's object, and what a reply without one
#: gives under the official reading. ``no_json`` marks a reply the official code replaces by its
#: stand-in: stage 1 (XR/xr.py:308-313) step1 = [["Modification", T_m]], step2 = [C_r], filled in by
#: the caller; stage 2 (:696-707, :720-721) no questions, so every candidate scores 0. The cir-v2
#: reasoner's object (prompt1_stage1_reasoner_v2.txt) is kept whole, the rewriter's input; ``v2``
#: None: the official code keeps no cir-v2 result and so rewrites no caption.
_OFFICIAL_JSON: dict[str, tuple[Any, dict[str, Any]]] = {
    "official_reasoner": (_reasoner_fields, {"step1": [], "step2": [], "no_json": True}),
    "official_questions": (_question_fields, {"statements": [], "no_json": True}),
    "official_reasoner_v2": (lambda obj: {"v2": obj}, {"v2": None}),
}


def parse_official(fmt: str, text: str) -> dict[str, Any]:
    """An official prompt's reply in format ``fmt`` (a key of :data:`_OFFICIAL_JSON`, ``+json_repair``:
    the official code's reading, :func:`official_json`, which never raises).
    unirag's reading (:func:`extract_json`) raises MalformedOutput, so the reply is asked for again,
    when it holds no JSON object (a cir-v2 one must not be empty) or no [question, answer] pair."""
    name, _, repair = fmt.partition("+")
    fields, stand_in = _OFFICIAL_JSON[name]
    v2 = name == "official_reasoner_v2"
    if repair:
        obj = official_json(text, v2=v2)
        return fields(obj) if isinstance(obj, dict) else dict(stand_in)
    obj, _ = extract_json(text)
    if not isinstance(obj, dict) or (v2 and not obj):
        raise MalformedOutput("expected a non-empty JSON object" if v2 else "expected a JSON object")
    out = fields(obj)
    if out.get("statements") == []:
        raise MalformedOutput("no [question, answer] pair under 'step2'")
    return out


def clean_rewritten_caption(text: str) -> str:
    """The caption rewriter's reply cleaned as the official code does (XR/xr.py:410-417): stripped;
    a reply opening with a code fence becomes the fence's content; one pair of enclosing double
    quotes is removed. May be empty (the 'aug' list then gets no rewritten caption, :457)."""
    t = (text or "").strip()
    m = re.match(r"```(?:\w+)?\s*([\s\S]*?)\s*```", t)
    if m:
        t = m.group(1).strip()
    if t.startswith('"') and t.endswith('"'):
        t = t[1:-1].strip()
    return t


#: Reply formats a call may name instead of its role's schema (``CallRequest.fmt``); part of the cache key.
#: A ``+json_repair`` format is the official code's reading (xr_json_parsing=official): one repair
#: pass, never raises, so the reply is never asked for again.
FORMATS = {  # official yes/no readings: "yes" anywhere (any case; 01yzzyu/xr.github.io XR/xr.py:793, the QA path),
    # or "yes" without "no" (substrings, any case; :819-821, the caption path's _is_yes)
    "yes_no_any": lambda text: "yes" in text.strip().lower(),
    "yes_no_strict": lambda text: "yes" in text.strip().lower() and "no" not in text.strip().lower(),
           **{name + repair: partial(parse_official, name + repair) for name in _OFFICIAL_JSON
              for repair in ("", "+json_repair")},
           "official_rewriter": clean_rewritten_caption}


def parse_reply(role: str, text: str, expect_answers: int | None = None, fmt: str | None = None) -> tuple[Any, bool]:
    """Validated output of ``role`` from reply ``text``: (output, repaired?). Raises MalformedOutput.

    ``fmt``: one of :data:`FORMATS` instead of the role's schema (a yes/no reply reads as a bool).
    """
    if fmt is not None:  # one of the formats the stages name (a constant of the code, never user input)
        return FORMATS[fmt](text), False
    schema = ROLES[role].schema
    if schema is None:
        caption = text.strip().strip('"').strip()
        if not caption:
            raise MalformedOutput("empty caption")
        return caption, False
    obj, repaired = extract_json(text)
    out = validate(obj, schema)
    if expect_answers is not None and len(out["answers"]) != expect_answers:
        raise MalformedOutput(f"expected {expect_answers} answers, got {len(out['answers'])}")
    return out, repaired


def call_agent(generator, role: str, messages: list[Message], options=None, json_attempts: int = 3,
               expect_answers: int | None = None, fmt: str | None = None) -> dict[str, Any]:
    """Call ``generator`` for ``role`` until the reply parses (at most ``json_attempts`` calls).

    A malformed reply is shown back to the model with what was wrong. Backend errors propagate to
    the shared retry loop; a reply still malformed at the end raises a non-retryable :class:`MalformedResponseError`.
    """
    from unirag.generators.base import GenerationOptions

    options = options or GenerationOptions()
    if fmt is None and ROLES[role].schema is not None and options.json_schema is None:
        options = dataclasses.replace(options, json_schema=ROLES[role].schema)
    convo = list(messages)
    usage: Counter[str] = Counter()
    for attempt in range(1, max(1, json_attempts) + 1):  # at least one call: text and err are always set
        gen = generator.generate(convo, options)
        text = gen.text or ""
        usage.update(asdict(gen.usage))
        try:
            output, repaired = parse_reply(role, text, expect_answers, fmt)
            return {"output": output, "raw": text, "repaired": repaired, "calls": attempt, "usage": dict(usage)}
        except MalformedOutput as e:
            err = e
            convo = convo + [Message("assistant", [TextPart(text)]), Message("user", [TextPart(
                f"That reply is not valid: {e}. Answer again with the JSON object only, exactly as asked.")])]
    snippet = text[:200].replace("\n", " ")
    raise MalformedResponseError(f"{role}: malformed reply after {json_attempts} call(s) ({err}); "
                                 f"last reply: {snippet!r}", retryable=False)
