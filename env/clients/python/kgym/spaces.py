"""Spaces over JSON values, with the JSON schema attached.

kgym's actions are tool calls and its observations are JSON objects of text and structured data:
neither is a tensor. gymnasium's ``spaces.Text`` refuses real observations (its character set and
length are fixed), so ``JsonSpace`` is a small ``gymnasium.spaces.Space`` (a stand-in with the same
methods when gymnasium is not installed) whose members are JSON values valid against its
``.schema``. ``ActionSpace`` is the space of tool calls: ``.tools`` holds the server's tool list
(``/v1/tools``, OpenAI format, ready for an LLM), ``.schema`` the kgym action form for each tool.

``contains`` validates with a small JSON-schema subset (type, properties, required,
additionalProperties, items, minItems/maxItems, enum, const, minimum/maximum, minLength/maxLength,
oneOf/anyOf): the keywords the tool schemas use. ``sample`` draws from the space's own seeded RNG;
an action space samples only harmless read-only calls (Read, Grep, Glob on the task's model.py),
so that ``gymnasium.utils.env_checker.check_env`` can step with sampled actions without changing
the workspace.
"""
import json
import math
import random
from typing import Any, Callable, Dict, List, Optional, Sequence

try:  # gymnasium is optional: the package works on a bare Python
    import gymnasium as _gym
    from gymnasium.spaces import Space as _SpaceBase

    HAVE_GYMNASIUM = True
except ImportError:  # pragma: no cover - exercised by tests/clients/test_bare_python.py
    _gym = None
    HAVE_GYMNASIUM = False

    class _SpaceBase:  # type: ignore[no-redef]
        """Stand-in for gymnasium.spaces.Space: the same methods, no numpy."""

        def __init__(self, shape=None, dtype=None, seed=None):
            self._shape = shape
            self.dtype = dtype
            self._np_random = None

        @property
        def shape(self):
            return self._shape

        @property
        def is_np_flattenable(self):
            return False

        def seed(self, seed=None):
            return [seed]

        def sample(self, mask=None, probability=None):
            raise NotImplementedError

        def contains(self, x):
            raise NotImplementedError

        def __contains__(self, x):
            return self.contains(x)

__all__ = ["JsonSpace", "ActionSpace", "validate", "is_json_value", "normalize_action",
           "HAVE_GYMNASIUM", "MAX_ACTIONS"]

MAX_ACTIONS = 16  # actions per step (turn), the server's limit

_TYPES = {
    "object": lambda v: isinstance(v, dict),
    "array": lambda v: isinstance(v, list),
    "string": lambda v: isinstance(v, str),
    "integer": lambda v: isinstance(v, int) and not isinstance(v, bool),
    "number": lambda v: isinstance(v, (int, float)) and not isinstance(v, bool),
    "boolean": lambda v: isinstance(v, bool),
    "null": lambda v: v is None,
}


def is_json_value(v: Any, depth: int = 0) -> bool:
    """Whether v is made only of dict (str keys), list, str, int, float, bool and None."""
    if depth > 200:
        return False
    if v is None or isinstance(v, (str, bool, int)):
        return True
    if isinstance(v, float):
        return v == v and v not in (float("inf"), float("-inf"))
    if isinstance(v, list):
        return all(is_json_value(x, depth + 1) for x in v)
    if isinstance(v, dict):
        return all(isinstance(k, str) and is_json_value(x, depth + 1) for k, x in v.items())
    return False


def validate(value: Any, schema: Any) -> Optional[str]:
    """None when value matches schema (the subset above), else why not."""
    if schema is True or schema is None or schema == {}:
        return None
    if schema is False:
        return "no value is allowed here"
    t = schema.get("type")
    if t is not None:
        names = t if isinstance(t, list) else [t]
        if not any(_TYPES.get(n, lambda v: True)(value) for n in names):
            return f"expected {'/'.join(names)}, got {type(value).__name__}"
    if "const" in schema and value != schema["const"]:
        return f"expected {schema['const']!r}"
    if "enum" in schema and value not in schema["enum"]:
        return f"{value!r} is not one of {schema['enum']!r}"
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        if "minimum" in schema and value < schema["minimum"]:
            return f"{value} is below the minimum {schema['minimum']}"
        if "maximum" in schema and value > schema["maximum"]:
            return f"{value} is above the maximum {schema['maximum']}"
    if isinstance(value, str):
        if "minLength" in schema and len(value) < schema["minLength"]:
            return "string too short"
        if "maxLength" in schema and len(value) > schema["maxLength"]:
            return "string too long"
    if isinstance(value, list):
        if "minItems" in schema and len(value) < schema["minItems"]:
            return f"fewer than {schema['minItems']} items"
        if "maxItems" in schema and len(value) > schema["maxItems"]:
            return f"more than {schema['maxItems']} items"
        if isinstance(schema.get("items"), dict):
            for i, item in enumerate(value):
                why = validate(item, schema["items"])
                if why:
                    return f"[{i}]: {why}"
    if isinstance(value, dict):
        props = schema.get("properties", {})
        for key in schema.get("required", []):
            if key not in value:
                return f"missing required property {key!r}"
        extra = schema.get("additionalProperties", True)
        for key, item in value.items():
            if key in props:
                why = validate(item, props[key])
            elif extra is False:
                why = "is not allowed (no additional properties)"
            elif isinstance(extra, dict):
                why = validate(item, extra)
            else:
                why = None
            if why:
                return f"{key!r}: {why}"
    for word in ("oneOf", "anyOf"):
        if word in schema:
            ok = sum(1 for s in schema[word] if validate(value, s) is None)
            if ok == 0 or (word == "oneOf" and ok > 1):
                return f"matches {ok} of the {word} alternatives"
    return None


class JsonSpace(_SpaceBase):
    """The JSON values valid against ``schema`` (a dict; ``{}`` means any JSON value).

    ``sampler(rng)``, when given, draws members (``rng`` is a ``random.Random`` seeded by
    ``seed()``); otherwise ``sample`` builds a small value from the schema.
    """

    def __init__(self, schema: Optional[Dict[str, Any]] = None,
                 sampler: Optional[Callable[[random.Random], Any]] = None,
                 seed: Optional[int] = None):
        self.schema = dict(schema or {})
        self._sampler = sampler
        self._rng = random.Random(seed)
        super().__init__(shape=None, dtype=None, seed=seed)

    @property
    def is_np_flattenable(self) -> bool:
        return False

    def seed(self, seed: Optional[int] = None):
        """Seeds the sampler (and gymnasium's generator when present); returns the seeds."""
        if seed is None:
            seed = random.SystemRandom().randrange(2 ** 63)
        self._rng = random.Random(seed)
        if HAVE_GYMNASIUM:
            super().seed(seed)
        return [seed]

    def contains(self, x: Any) -> bool:
        return is_json_value(x) and validate(x, self.schema) is None

    def explain(self, x: Any) -> Optional[str]:
        """None when x is a member, else why it is not."""
        if not is_json_value(x):
            return "not a JSON value"
        return validate(x, self.schema)

    def sample(self, mask: Any = None, probability: Any = None) -> Any:
        if mask is not None or probability is not None:
            raise ValueError("kgym: JsonSpace.sample takes no mask or probability")
        if self._sampler is not None:
            return self._sampler(self._rng)
        return _sample_schema(self.schema, self._rng, 0)

    def to_jsonable(self, sample_n: Sequence[Any]) -> List[Any]:
        return [json.loads(json.dumps(x)) for x in sample_n]

    def from_jsonable(self, sample_n: Sequence[Any]) -> List[Any]:
        return list(sample_n)

    def __eq__(self, other: Any) -> bool:
        return isinstance(other, JsonSpace) and type(other) is type(self) and \
            other.schema == self.schema

    def __hash__(self) -> int:
        return hash(json.dumps(self.schema, sort_keys=True))

    def __repr__(self) -> str:
        return f"{type(self).__name__}({json.dumps(self.schema)[:80]})"


def _sample_schema(schema: Dict[str, Any], rng: random.Random, depth: int) -> Any:
    """A small member of a schema (enough for JSON objects of known properties)."""
    if "const" in schema:
        return schema["const"]
    if "enum" in schema:
        return rng.choice(schema["enum"])
    for word in ("oneOf", "anyOf"):
        if schema.get(word):
            return _sample_schema(rng.choice(schema[word]), rng, depth + 1)
    t = schema.get("type", "object")
    if isinstance(t, list):
        t = rng.choice(t)
    if t == "object":
        props = schema.get("properties", {})
        return {k: _sample_schema(v, rng, depth + 1) for k, v in props.items()
                if k in schema.get("required", []) or (depth < 3 and rng.random() < 0.5)}
    if t == "array":
        n = max(int(schema.get("minItems", 0)), rng.randrange(3) if depth < 3 else 0)
        return [_sample_schema(schema.get("items", {"type": "string"}), rng, depth + 1)
                for _ in range(n)]
    if t == "string":
        return "".join(rng.choice("abcdefghij ") for _ in range(rng.randrange(1, 12)))
    if t in ("integer", "number"):
        lo = schema.get("minimum", schema["maximum"] - 100 if "maximum" in schema else 0)
        hi = schema.get("maximum", lo + 100)
        if t == "integer":
            return rng.randint(math.ceil(lo), math.floor(hi))
        return rng.uniform(lo, hi)
    if t == "boolean":
        return rng.random() < 0.5
    return None


# ---- actions ---------------------------------------------------------------------------------

def normalize_action(action: Any) -> Dict[str, Any]:
    """``{"tool", "args", "call_id"}`` of one action in any accepted form (kgym's own, an OpenAI
    ``tool_call``, an Anthropic ``tool_use``); raises ValueError when it is none of them. The
    server does the same; this lets ``contains`` check arguments against the tool's schema."""
    if not isinstance(action, dict):
        raise ValueError(f"an action is a JSON object, not {type(action).__name__}")
    if "tool" in action:
        args = action.get("args", {})
        call_id = action.get("call_id", "")
        name = action["tool"]
    elif isinstance(action.get("function"), dict):
        fn = action["function"]
        name = fn.get("name")
        raw = fn.get("arguments", "{}")
        try:
            args = json.loads(raw) if isinstance(raw, str) else raw
        except ValueError as e:
            raise ValueError(f"function.arguments is not JSON: {e}") from None
        call_id = action.get("id", "")
    elif action.get("type") == "tool_use":
        name, args, call_id = action.get("name"), action.get("input", {}), action.get("id", "")
    else:
        raise ValueError("an action needs 'tool' (kgym), 'function' (OpenAI) or "
                         "type 'tool_use' (Anthropic)")
    if not isinstance(name, str) or not name:
        raise ValueError("the tool name must be a non-empty string")
    if not isinstance(args, dict):
        raise ValueError("the tool's arguments must be a JSON object")
    return {"tool": name, "args": args, "call_id": call_id if isinstance(call_id, str) else ""}


class ActionSpace(JsonSpace):
    """Tool calls: one action (a dict in kgym, OpenAI or Anthropic form) or a list of 1 to 16.

    ``.tools``: the server's tool list in OpenAI format (what an LLM is given). ``.schema``: a
    JSON schema of the kgym form ``{"tool", "args", "call_id"}``, one alternative per tool with
    that tool's parameter schema (tool names match case-insensitively, as on the server).
    """

    def __init__(self, tools: List[Dict[str, Any]], seed: Optional[int] = None,
                 sample_path: str = "/workspace/model.py"):
        self.tools = [dict(t) for t in tools]
        self._params: Dict[str, Dict[str, Any]] = {}
        alternatives = []
        for t in self.tools:
            fn = t.get("function", t)
            name, params = fn["name"], fn.get("parameters") or fn.get("input_schema") or {}
            self._params[name.lower()] = params
            alternatives.append({
                "type": "object",
                "properties": {"tool": {"const": name}, "args": params,
                               "call_id": {"type": "string"}},
                "required": ["tool", "args"],
                "additionalProperties": False,
            })
        schema = {"oneOf": alternatives}
        self.sample_path = sample_path
        super().__init__(schema, sampler=self._sample_readonly, seed=seed)

    @property
    def tool_names(self) -> List[str]:
        return [t.get("function", t)["name"] for t in self.tools]

    def explain(self, x: Any) -> Optional[str]:
        if not is_json_value(x):
            return "not a JSON value"
        items = x if isinstance(x, list) else [x]
        if not 1 <= len(items) <= MAX_ACTIONS:
            return f"a turn holds 1 to {MAX_ACTIONS} actions, not {len(items)}"
        for i, item in enumerate(items):
            try:
                a = normalize_action(item)
            except ValueError as e:
                return f"action {i}: {e}"
            params = self._params.get(a["tool"].lower())
            if params is None:
                return f"action {i}: unknown tool {a['tool']!r}"
            why = validate(a["args"], params)
            if why:
                return f"action {i} ({a['tool']}): {why}"
        return None

    def contains(self, x: Any) -> bool:
        return self.explain(x) is None

    def _sample_readonly(self, rng: random.Random) -> Dict[str, Any]:
        """A harmless call that only reads the task's model.py (fixed in every workspace)."""
        kind = rng.choice(["Read", "Grep", "Glob"])
        kind = kind if kind.lower() in self._params else self.tool_names[0]
        if kind == "Read":
            args = {"file_path": self.sample_path, "offset": rng.randrange(1, 6),
                    "limit": rng.randrange(1, 40)}
        elif kind == "Grep":
            args = {"pattern": rng.choice(["torch", "def ", "class ", "return", "forward"]),
                    "path": self.sample_path,
                    "output_mode": rng.choice(["content", "count", "files_with_matches"])}
        elif kind == "Glob":
            args = {"pattern": self.sample_path.rsplit("/", 1)[-1]}
        else:  # a server without the read-only tools: an empty-argument call of its first tool
            args = {}
        return {"tool": kind, "args": args}
