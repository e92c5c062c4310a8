"""Every public store method with random and hostile arguments, on both dialects (issue 10).

Each example is one call on a store that keeps its rows from example to example (one
database per dialect for the whole test; ids that calls created are reused, so updates
find rows). Around every call the whole database is snapshotted (each table's rows,
hashed), and the test asserts:

- the call succeeds or raises a HubStoreError subclass, never anything else;
- a failed call wrote nothing (the snapshot is unchanged);
- what a successful call returned reads back equal, with the same Python types, and
  the JSON and text values it was given are stored as given.

The number of calls per dialect is the ``hostile`` profile's max_examples (override with
HUBSTORE_HOSTILE_EXAMPLES for a longer run).
"""

from __future__ import annotations

import hashlib
import inspect
import math
import os
from collections.abc import Callable, Iterable, Sequence
from types import UnionType
from typing import Any, Literal, Union, Unpack, get_args, get_origin, get_type_hints

import pytest
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st
from sqlalchemy import inspect as sa_inspect
from sqlalchemy import text

from hubstore import HubStore
from hubstore.errors import HubStoreError
from hubstore.ids import now_ms
from hubstore.jsontype import MAX_JSON_DEPTH
from hubstore.models import (
    AGENT_CLIS,
    AGENT_STATUSES,
    ASSIGN_STATUSES,
    HUMAN_DEFAULT_ACTIONS,
    HUMAN_KINDS,
    HUMAN_STATES,
    MESSAGE_STATUSES,
    MESSAGE_TYPES,
    REFLEXION_TYPES,
    TIMEOUT_FROM,
    Agent,
    AssignJob,
    Base,
    HumanRequest,
    Message,
    PipelineState,
    ReflexionEntry,
)
from hubstore.operations import store_methods
from hubstore.results import AssignOutcome
from hubstore.services.waiting import MessageFeed
from hubstore.types import AssignPatch, PipelineFields, ReflexionPatch
from hubstore.validation import MAX_KEY_BYTES

settings.register_profile(
    "hostile",
    max_examples=int(os.environ.get("HUBSTORE_HOSTILE_EXAMPLES", "400")),
    deadline=None,
    database=None,
    # CI checks the same examples every run (a red run can be reproduced); elsewhere
    # each run explores new ones.
    derandomize=os.environ.get("CI", "").lower() == "true",
    # The store keeps its rows from call to call, so a replayed example may behave
    # differently: no shrinking (a failure reports the call as it was made).
    phases=[Phase.explicit, Phase.generate],
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow,
                           HealthCheck.data_too_large, HealthCheck.filter_too_much],
)
HOSTILE = settings.get_profile("hostile")


def nested(depth: int) -> Any:
    value: Any = 1
    for _ in range(depth):
        value = [value]
    return value


# --- values ------------------------------------------------------------------------

_odd_chars = st.sampled_from(["\ud800", "\udfff", "\x00", "\u2028", "\ufeff", "\U0001f600",
                              "é", "'", '"', "%", "_", "\\"])
#: Any text, lone surrogates and U+0000 included.
any_text = st.text(st.one_of(st.characters(exclude_categories=()), _odd_chars), max_size=40)
#: Text both dialects store: no surrogates, no U+0000.
good_text = st.text(st.characters(exclude_categories=["Cs"], exclude_characters="\x00"),
                    max_size=30)
small_id = st.text("abcxyz-.:", min_size=1, max_size=6)

BAD_TEXT = ["", " ", "x\ud800y", "\udfff", "a\x00b", "\x00", "i" * 10_000, "é" * 600,
            "\U0001f600" * 251, "1_000", "0x10", "Infinity", "null", "true", "-0", "1e3"]
BAD_INTS = [0, -1, 1, 2**31 - 1, 2**31, 2**53 + 1, 2**62, 2**62 + 1, 2**63 - 1, 2**63,
            -(2**63), -(2**63) - 1, 10**30, -(10**30)]
BAD_FLOATS = [math.nan, math.inf, -math.inf, 1e300, -1e300, 1e16, -0.0, 2.7, 5e-324, 0.5]
WRONG_TYPES: list[Any] = [None, [], ["a"], {}, {"a": 1}, b"bytes", bytearray(b"x"), True,
                          False, (1,), {1, 2}, frozenset(), object(), 1j, Ellipsis]
BAD_JSON: list[Any] = [nested(1000), nested(201), nested(200), {1: "a"}, {"a": {1, 2}},
                       {"f": 1e16}, {"f": 1e300}, [1e16, -1e300], [], {"k\x00": 1},
                       {"\ud800": 1}, ["a\x00"], [2**63], [-(2**63) - 1], {"n": math.nan},
                       [b"x"], {"deep": nested(150)}, [-0.0]]

json_scalars = (st.none() | st.booleans() | st.integers(-(2**64), 2**64)
                | st.floats(allow_nan=True, allow_infinity=True) | any_text)
any_json = st.recursive(
    json_scalars,
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(any_text, inner, max_size=4),
    max_leaves=12)
good_scalars = (st.none() | st.booleans() | st.integers(-(2**63), 2**63 - 1)
                | st.floats(allow_nan=False, allow_infinity=False) | good_text)
good_json = st.recursive(
    good_scalars,
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(good_text, inner, max_size=4),
    max_leaves=12)
#: Values at the limits, which must be taken and read back exactly.
EDGE_JSON: list[Any] = [nested(MAX_JSON_DEPTH), {"f": 1e16}, {"f": 1e300}, [], {}, "",
                        [2**63 - 1, -(2**63)], "é" * 600, {"": None}, [-0.0], 1e16,
                        {"a": {"b": [1.5, "x", None, True]}}, [0.1, 1.0, 1]]
good_json = good_json | st.sampled_from(EDGE_JSON)
good_object = st.dictionaries(good_text, good_json, max_size=4) | st.sampled_from(
    [{"deep": nested(MAX_JSON_DEPTH - 1)}, {"f": 1e16, "i": 2**62}])
EDGE_IDS = ["é" * (MAX_KEY_BYTES // 2), "i" * MAX_KEY_BYTES, "😀" * 250, " ", "%_\\"]
small_id = small_id | st.sampled_from(EDGE_IDS)

hostile = st.one_of(
    st.sampled_from(BAD_TEXT), st.sampled_from(BAD_INTS), st.sampled_from(BAD_FLOATS),
    st.sampled_from(WRONG_TYPES), st.sampled_from(BAD_JSON), any_text, any_json,
    st.integers(), st.floats(),
    st.lists(any_text, max_size=3), st.just(["t"] * 600),
    st.lists(st.sampled_from(["t.a", "t.b"]), min_size=501, max_size=501).map(
        lambda ts: [f"{t}.{i}" for i, t in enumerate(ts)]))


class Pools:
    """Ids that earlier calls created, so that later calls find rows."""

    def __init__(self) -> None:
        self.ids: dict[str, list[str]] = {name: [] for name in (
            "agent", "message", "job", "request", "entry", "team", "trace", "correlation",
            "cursor")}

    def add(self, kind: str, value: object) -> None:
        if isinstance(value, str) and value not in self.ids[kind][-50:]:
            self.ids[kind].append(value)


def pooled(pools: Pools, kind: str, fresh: st.SearchStrategy[Any]) -> st.SearchStrategy[Any]:
    """An id an earlier call created (when there is one), else ``fresh``. The choices
    drawn do not depend on the pool's size (the pool is state outside hypothesis)."""
    found = pools.ids[kind][-50:]
    return st.tuples(st.booleans(), st.integers(0, 49), fresh).map(
        lambda t: found[t[1] % len(found)] if t[0] and found else t[2])


def valid(kind: str, pools: Pools) -> st.SearchStrategy[Any]:
    """A value of this kind that the method should take (``?kind``: or None)."""
    if kind.startswith("?"):
        return st.none() | valid(kind[1:], pools)
    enums = {"cli": AGENT_CLIS, "agent_status": AGENT_STATUSES, "msg_type": MESSAGE_TYPES,
             "msg_status": MESSAGE_STATUSES, "assign_status": ASSIGN_STATUSES,
             "human_kind": HUMAN_KINDS, "human_state": HUMAN_STATES,
             "human_answer": tuple(s for s in HUMAN_STATES if s != "pending"),
             "human_action": HUMAN_DEFAULT_ACTIONS, "reflexion_type": REFLEXION_TYPES,
             "timeout_from": TIMEOUT_FROM}
    if kind in enums:
        return st.sampled_from(list(enums[kind]))
    if kind in pools.ids:
        return pooled(pools, kind, small_id)
    topic = st.sampled_from(["t.a", "t.b", "assign.job", "ops"]) | small_id
    strategies: dict[str, st.SearchStrategy[Any]] = {
        "topic": topic,
        "topics": st.lists(topic, max_size=4) | st.just([f"t.{i}" for i in range(520)]),
        "text": good_text,
        "opt_text": st.none() | good_text,
        "opt_id": st.none() | small_id,
        "json": good_json,
        "object": st.none() | good_object,
        "list": st.lists(good_json, max_size=3),
        "pid": st.none() | st.integers(0, 2**63 - 1),
        "count": st.integers(0, 5),
        "opt_count": st.none() | st.integers(0, 2**63 - 1),
        "duration": st.integers(0, 10**9) | st.sampled_from([0, 2**62]),
        "time": st.none() | st.integers(-(10**12), 10**13) | st.just(now_ms()),
        "opt_time": st.none() | st.integers(0, 2**62),
        "priority": st.integers(1, 9),
        "js_number": (st.integers(-(2**70), 2**70) | st.floats() | st.sampled_from(
            [None, "12", " 7 ", "1_000", "0x1F", "abc", "", "Infinity", True])),
        "confidence": st.floats(-2, 2, allow_nan=False),
        "limit": st.integers(0, 100),
        "bool": st.booleans(),
        "reported": st.sampled_from(["running", "succeeded", "failed", "timed_out",
                                     "in_progress", "timeout", "error", "success",
                                     "completed", " Success ", "FAILED"]),
        "statuses": st.none() | st.lists(st.sampled_from(list(ASSIGN_STATUSES)), max_size=3),
        "timeout": st.sampled_from([0, 0.0, 0.001]),
        "feed_batch": st.integers(1, 1000),
        "attempt": st.integers(1, 3),
        "limit_key": st.sampled_from(["codex", "gemini", "k"]) | small_id,
        "opt_count1": st.none() | st.integers(1, 100),
        "cron": st.none() | st.sampled_from(["*/5 * * * *", "0 3 * * *"]),
        "every": st.none() | st.integers(1_000, 10**9),
        "page_cursor": st.none() | st.sampled_from(["1:a", "9999999999999:z"]),
        "reflexion_cursor": st.none() | st.sampled_from(["0.5:1:a", "1.0:9999999999999:z"]),
        "extend": st.none() | st.integers(1, 86_400_000),
        "callback": st.none() | st.just(lambda *args: None),
        # (a job as a claim hands it out: its id, its worker and its attempt)
        "claimed_job": st.builds(lambda job_id, worker, attempt: AssignJob(
            job_id=job_id, worker_agent=worker, attempt=attempt),
            pooled(pools, "job", small_id), pooled(pools, "agent", small_id),
            st.integers(1, 3)),
        "jobs": st.lists(st.fixed_dictionaries(
            {"task": good_text}, optional={"priority": st.integers(1, 9)}),
            min_size=1, max_size=3),
        "reports": st.lists(st.fixed_dictionaries({
            "job_id": pooled(pools, "job", small_id),
            "status": st.sampled_from(["running", "succeeded", "failed"])}),
            min_size=1, max_size=2),
        "cursor": pooled(pools, "cursor", st.sampled_from(["feed1:0", "feed1:5"])) | st.none()
        | st.just("feed1:9223372036854775807"),
    }
    return strategies[kind]


def bad(kind: str) -> st.SearchStrategy[Any]:
    """A hostile value for this kind (a wait's timeout stays short: None waits forever)."""
    kind = kind.removeprefix("?")
    if kind == "cursor":
        return hostile | st.sampled_from(["feed1:9999999999999999999", "feed1:-1", "feed2:1"])
    if kind == "timeout":
        return st.sampled_from([-1, math.nan, "0", [], b"", "-1", math.inf * 0, -0.5])
    return hostile


# --- the methods: their arguments' kinds, read from the facade's signatures -----------

#: The enums (Literal types) by their values: the kind each one is.
ENUMS: dict[tuple[str, ...], str] = {
    AGENT_CLIS: "cli", AGENT_STATUSES: "agent_status", MESSAGE_TYPES: "msg_type",
    MESSAGE_STATUSES: "msg_status", ASSIGN_STATUSES: "assign_status",
    HUMAN_KINDS: "human_kind", HUMAN_STATES: "human_state",
    HUMAN_DEFAULT_ACTIONS: "human_action", REFLEXION_TYPES: "reflexion_type",
    TIMEOUT_FROM: "timeout_from"}
#: A string that names a row an earlier call made, by the parameter's name (an ``id``
#: by the method's module).
ROW_IDS = {"agent_id": "agent", "job_id": "job", "message_id": "message",
           "request_id": "request", "team_name": "team", "trace_id": "trace",
           "correlation_id": "correlation"}
ID_BY_MODULE = {"messages": "message", "reflexion": "entry"}
#: Where a parameter needs a hand-picked kind: its name and type do not tell (method,
#: parameter) -> kind.
OVERRIDES: dict[tuple[str, str], str] = {
    ("report_assign_result", "status"): "reported",  # any case and spacing: a str
    ("finish_assign", "status"): "reported",
    ("answer_human_request", "state"): "human_answer",  # an answer: not "pending"
    ("list_reflexion", "type"): "reflexion_type",  # a filter, typed str
    ("page_reflexion", "type"): "reflexion_type",
    ("page_assigns", "after"): "page_cursor",
    ("page_reflexion", "after"): "reflexion_cursor",
    ("page_messages_by_trace", "after"): "page_cursor",
    ("touch_assign", "extend_ms"): "extend",
    ("set_assign_limit", "per_ms"): "opt_count1",
    ("set_assign_schedule", "every_ms"): "every",
    ("set_assign_schedule", "name"): "limit_key",
    ("remove_assign_schedule", "name"): "limit_key",
    ("assign_many", "jobs"): "jobs",
    ("report_assign_results", "reports"): "reports",
    # create_assign's keyword arguments (**fields: Any)
    ("assign_async", "**"): "create_fields",
    ("set_assign_schedule", "**"): "create_fields",
}
#: ack_messages takes any arguments (the reference's no-op): these, by position.
ACK_ARGUMENTS = {"message_ids": "list", "agent_id": "agent"}
#: What a method returns that the test calls next: its method, whose arguments are
#: "next.<name>".
FOLLOW_UPS: dict[str, Callable[..., Any]] = {"message_feed": MessageFeed.next}


def _optional(hint: Any) -> tuple[Any, bool]:
    """The type without None, and whether None was in it."""
    args = get_args(hint)
    if get_origin(hint) in (Union, UnionType) and type(None) in args:
        rest = [a for a in args if a is not type(None)]
        return (rest[0] if len(rest) == 1 else Union[tuple(rest)]), True  # noqa: UP007
    return hint, False


def _literal(hint: Any) -> str | None:
    if get_origin(hint) is not Literal:
        return None
    try:
        return ENUMS[get_args(hint)]
    except KeyError:
        raise LookupError(f"an enum the test does not know: {hint} (add it to ENUMS)"
                          ) from None


def kind_of(method: str, module: str, name: str, hint: Any) -> str:
    """The kind of a parameter (what ``valid`` and ``bad`` draw), from its name and type;
    LookupError for a parameter the generator cannot handle."""
    override = OVERRIDES.get((method, name))
    if override is not None:
        return override
    base, optional = _optional(hint)
    kind = _kind(module, name, base, optional)
    takes_none = kind.startswith("opt_") or kind in (
        "time", "pid", "object", "cursor", "cron", "timeout", "callback", "json", "statuses")
    return f"?{kind}" if optional and not takes_none else kind


def _kind(module: str, name: str, hint: Any, optional: bool) -> str:
    origin, args = get_origin(hint), get_args(hint)
    enum = _literal(hint)
    if enum is not None:
        return enum
    if origin in (list, Sequence) and args and _literal(args[0]) == "assign_status":
        return "statuses"
    if name == "timeout_s":
        return "timeout"  # (short: None would wait for ever)
    if hint is bool:
        return "bool"
    if hint is float:
        return "confidence" if name.endswith("confidence") else _unknown(name, hint)
    if hint is object:
        return "js_number"  # a number as JavaScript takes it (the reference's Number())
    if hint is Any:
        return "json"
    if hint is AssignJob:
        return "claimed_job"
    if origin is Callable:
        return "callback"
    if origin is dict and args[:1] == (str,):
        return "object"
    if origin in (Iterable, Sequence, list):
        return "topics" if name.endswith("topics") else "list"
    if hint is int:
        return _int_kind(name, optional)
    if hint is str:
        return _str_kind(module, name, optional)
    return _unknown(name, hint)


def _int_kind(name: str, optional: bool) -> str:
    if name == "now_ms":
        return "time"
    if name in ("pid", "priority"):
        return name
    if name == "attempt":
        return "opt_count" if optional else "attempt"
    if name in ("limit", "batch_size", "max_messages"):
        return "feed_batch"
    if name.endswith("_ms"):
        return "opt_time" if optional else "duration"
    if name.startswith("max_") and optional and name != "max_retries":
        return "opt_count1"
    return "opt_count" if optional else "count"


def _str_kind(module: str, name: str, optional: bool) -> str:
    if name == "id" or (name in ROW_IDS and name not in ("trace_id", "correlation_id")
                        and optional):
        if optional:
            return "opt_id"  # a caller-chosen id for the row it writes
        if module not in ID_BY_MODULE:
            return _unknown(name, str)
        return ID_BY_MODULE[module]
    if name in ROW_IDS:
        return ROW_IDS[name]
    if name.endswith("_agent"):
        return "agent"
    if name == "topic":
        return "topic"
    if name in ("key", "limit_key"):
        return "limit_key"
    if name in ("cursor", "cron"):
        return name
    if name.endswith(("_id", "_key")):
        return "opt_id" if optional else _unknown(name, str)
    return "opt_text" if optional else "text"


def _unknown(name: str, hint: Any) -> str:
    raise LookupError(f"{name}: {hint}: the test has no hostile arguments for this "
                      "parameter (give its kind in OVERRIDES, or teach kind_of its type)")


def parameter_kinds(method: str, function: Callable[..., Any], skip: int = 1
                    ) -> dict[str, str]:
    """Argument name -> kind, for every parameter of ``function`` after the first
    ``skip`` (the scope); ``**`` for a TypedDict's or create_assign's keyword arguments."""
    module = function.__module__.rpartition(".")[2]
    hints = get_type_hints(function)
    kinds: dict[str, str] = {}
    for param in list(inspect.signature(function).parameters.values())[skip:]:
        if param.kind is param.VAR_KEYWORD:
            unpacked = get_args(hints[param.name]) if get_origin(
                hints[param.name]) is Unpack else ()
            kinds["**"] = OVERRIDES.get((method, "**")) or (
                f"patch:{unpacked[0].__name__}" if unpacked else _unknown(
                    f"**{param.name}", hints[param.name]))
        elif param.kind is param.VAR_POSITIONAL:
            _unknown(f"*{param.name}", hints.get(param.name))
        else:
            kinds[param.name] = kind_of(method, module, param.name, hints[param.name])
    return kinds


def patch_kinds(name: str) -> dict[str, str]:
    """The fields of a ``**`` argument: a TypedDict's, or create_assign's (the ones
    assign_async passes on)."""
    if name == "create_fields":
        return {arg: kind for arg, kind in parameter_kinds(
            "create_assign", store_methods()["create_assign"]).items()
            if arg not in ("supervisor_agent", "worker_agent")}
    typed = {"AssignPatch": AssignPatch, "PipelineFields": PipelineFields,
             "ReflexionPatch": ReflexionPatch}[name.removeprefix("patch:")]
    return {field: kind_of(typed.__name__, "types", field, hint)
            for field, hint in get_type_hints(typed).items()}


def method_kinds() -> dict[str, dict[str, str]]:
    """Every store method (HubOperations lists them) -> argument name -> kind."""
    methods: dict[str, dict[str, str]] = {}
    for name, function in store_methods().items():
        if name == "ack_messages":
            methods[name] = dict(ACK_ARGUMENTS)
            continue
        methods[name] = parameter_kinds(name, function)
        follow_up = FOLLOW_UPS.get(name)
        if follow_up is not None:
            methods[name] |= {f"next.{arg}": kind for arg, kind in parameter_kinds(
                name, follow_up).items()}
    return methods


#: name -> (argument name -> kind). Arguments are passed by keyword.
METHODS = method_kinds()
PATCHES = {kind: patch_kinds(kind) for spec in METHODS.values()
           for arg, kind in spec.items() if arg == "**"}


def test_every_store_method_gets_hostile_arguments() -> None:
    """Every method HubOperations lists is called, with every parameter it has."""
    assert set(METHODS) == set(store_methods())
    for name, function in store_methods().items():
        if name == "ack_messages":
            continue
        params = list(inspect.signature(function).parameters.values())[1:]
        named = {p.name for p in params if p.kind is not p.VAR_KEYWORD}
        assert named == {arg for arg in METHODS[name] if arg != "**"
                         and not arg.startswith("next.")}, name
    assert set(PATCHES) == {"create_fields", "patch:AssignPatch", "patch:PipelineFields",
                            "patch:ReflexionPatch"}


def test_a_parameter_the_generator_cannot_handle_fails() -> None:
    """A new method whose parameter has no kind fails here, naming the parameter."""
    def new_method(scope: Any, when: complex, what: Literal["x", "y"] = "x") -> None: ...

    with pytest.raises(LookupError, match="when: <class 'complex'>"):
        parameter_kinds("new_method", new_method)

    def other(scope: Any, what: Literal["x", "y"] = "x") -> None: ...

    with pytest.raises(LookupError, match="add it to ENUMS"):
        parameter_kinds("other", other)

    def patched(scope: Any, **fields: Any) -> None: ...

    with pytest.raises(LookupError, match=r"\*\*fields"):
        parameter_kinds("patched", patched)


def draw_call(data: st.DataObject, pools: Pools, name: str
              ) -> tuple[dict[str, Any], dict[str, Any]]:
    """The keyword arguments of one call (and of the follow-up call on its result)."""
    spec = METHODS[name]
    mode = data.draw(st.sampled_from(["valid", "valid", "one", "chaos"]), label="mode")
    names = [arg for arg in spec if arg != "**"]
    extra_kind = spec.get("**")
    if extra_kind:
        fields = PATCHES[extra_kind]
        chosen = data.draw(st.lists(st.sampled_from(sorted(fields)), unique=True,
                                    max_size=4), label="fields")
        kinds = {**{arg: spec[arg] for arg in names}, **{f: fields[f] for f in chosen}}
        if data.draw(st.integers(0, 9), label="typo") == 0:
            kinds["taks"] = "text"  # an unknown field
    else:
        kinds = {arg: spec[arg] for arg in names}
    signature = inspect.signature(getattr(HubStore, name))
    required = {arg for arg, param in signature.parameters.items()
                if param.default is param.empty and param.kind is param.POSITIONAL_OR_KEYWORD
                } | (set(kinds) - set(names))
    hostile_arg = data.draw(st.sampled_from(sorted(kinds)), label="hostile") \
        if mode == "one" and kinds else None
    kwargs: dict[str, Any] = {}
    for arg, kind in kinds.items():
        if arg not in required and mode == "valid" and kind != "timeout" \
                and not data.draw(st.booleans(), label=f"pass {arg}"):
            continue
        if arg == hostile_arg or (mode == "chaos" and data.draw(st.booleans(), label=arg)):
            kwargs[arg] = data.draw(bad(kind), label=arg)
        else:
            kwargs[arg] = data.draw(valid(kind, pools), label=arg)
    follow = {arg.removeprefix("next."): kwargs.pop(arg) for arg in list(kwargs)
              if arg.startswith("next.")}
    if name == "ack_messages":
        return {}, {"args": list(kwargs.values())}
    return kwargs, follow


# --- checks ------------------------------------------------------------------------

def snapshot(store: HubStore, tables: list[str]) -> tuple[tuple[str, int, str], ...]:
    """Every table's row count and a hash of its rows (order-independent)."""
    result = []
    with store.engine.connect() as conn:
        for table in tables:
            found = conn.execute(text(f'SELECT * FROM "{table}"'))
            rows = sorted(repr(tuple(row)) for row in found)
            digest = hashlib.sha256("\n".join(rows).encode("utf-8", "surrogatepass"))
            result.append((table, len(rows), digest.hexdigest()))
    return tuple(result)


def same(expected: Any, actual: Any) -> bool:
    """Equal, with the same Python types all the way down."""
    if isinstance(expected, dict):
        return type(actual) is dict and expected.keys() == actual.keys() and all(
            same(v, actual[k]) for k, v in expected.items())
    if isinstance(expected, list | tuple):
        return type(actual) is list and len(expected) == len(actual) and all(
            same(a, b) for a, b in zip(expected, actual, strict=True))
    return type(expected) is type(actual) and expected == actual


def as_written(value: Any) -> Any:
    """How a JSON value given to the store reads back: tuples as lists, -0.0 as 0.0."""
    if isinstance(value, dict):
        return {k: as_written(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [as_written(v) for v in value]
    if isinstance(value, float) and value == 0.0:
        return 0.0
    return value


_READERS: dict[type[Any], tuple[str, Callable[[HubStore, str], Any]]] = {
    Agent: ("agent_id", lambda s, k: s.get_agent(k)),
    Message: ("id", lambda s, k: s.get_message(k)),
    AssignJob: ("job_id", lambda s, k: s.get_assign(k)),
    HumanRequest: ("request_id", lambda s, k: s.get_human_request(request_id=k)),
    PipelineState: ("team_name", lambda s, k: s.get_pipeline_state(k)),
    ReflexionEntry: ("id", lambda s, k: s.get_reflexion(k)),
}


def columns(row: Base) -> dict[str, Any]:
    return {attr.key: getattr(row, attr.key) for attr in type(row).__mapper__.column_attrs}


def rows_in(value: Any) -> list[Any]:
    if isinstance(value, AssignOutcome):
        return [value.job] + ([value.message] if value.message is not None else [])
    if isinstance(value, tuple(_READERS)):
        return [value]
    if isinstance(value, list):
        return [v for v in value if isinstance(v, tuple(_READERS))]
    return []


def check_read_back(store: HubStore, name: str, kwargs: dict[str, Any], value: Any,
                    pools: Pools) -> None:
    """What a successful call returned is what is stored; given values are kept."""
    for row in rows_in(value):
        key_name, read = _READERS[type(row)]
        key = getattr(row, key_name)
        pools.add({Agent: "agent", Message: "message", AssignJob: "job",
                   HumanRequest: "request", PipelineState: "team",
                   ReflexionEntry: "entry"}[type(row)], key)
        if isinstance(row, Message | AssignJob):
            pools.add("trace", row.trace_id)
            pools.add("correlation", row.correlation_id)
        if name.startswith(("get_", "list_", "find_", "poll_")):
            continue  # reads: nothing written
        stored = read(store, key)
        assert stored is not None, f"{name}: {type(row).__name__} {key!r} is not stored"
        expected, actual = columns(row), columns(stored)
        for column, want in expected.items():
            assert same(want, actual[column]), (
                f"{name}: {type(row).__name__}.{column} was returned as {want!r} "
                f"({type(want).__name__}) but reads back {actual[column]!r}")
    given = {k: v for k, v in kwargs.items()}
    if name == "register_agent":
        agent = store.get_agent(given["agent_id"])
        assert agent is not None
        for column, arg, default in (("capabilities", "capabilities", []),
                                     ("topics", "topics", []), ("meta", "metadata", {})):
            value_given = given.get(arg)
            want = as_written(default if not value_given else
                              value_given if arg == "metadata" else list(value_given))
            assert same(want, getattr(agent, column)), (name, column, want)
        assert same(given.get("pid"), agent.pid)
        pools.add("agent", given["agent_id"])
    elif name in ("audit_log", "enqueue_message"):
        payload = given.get("payload")
        assert same(as_written({} if payload is None else payload), value.payload)
    elif name == "create_assign" and value.deduplicated:
        # A queued or running job held the unique key: that job, as it was written.
        assert value.unique_key == given.get("unique_key")
    elif name == "create_assign":
        payload = given.get("payload")
        want = {} if payload is None or payload in (0, "", False) else payload
        assert same(as_written(want), value.payload)
        for arg in ("result", "error"):
            assert same(as_written(given.get(arg)), getattr(value, arg)), arg
        if given.get("task"):
            assert value.task == given["task"]
    elif name == "insert_human_request":
        schema = given.get("requested_schema")
        assert same(as_written({} if schema is None else schema), value.schema)
        assert value.prompt == given["prompt"]
    elif name == "update_human_request" and value:
        stored_request = store.get_human_request(request_id=given["request_id"])
        assert stored_request is not None
        assert same(as_written(given.get("response")), stored_request.response)
        assert stored_request.state == given["state"]
    elif name == "save_pipeline_state":
        for field in PipelineFields.__annotations__:
            if field in given:
                assert same(as_written(given[field]), getattr(value, field)), field
    elif name == "add_reflexion":
        for column, arg in (("context", "context"), ("adaptive_state", "adaptive_state")):
            assert same(as_written(given.get(arg) or {}), getattr(value, column)), column
        assert value.error_pattern == given["error_pattern"]
    elif name == "patch_reflexion" and value is not None:
        for field in ("error_pattern", "error_message", "solution", "solution_code",
                      "hit_count", "success_count", "last_hit_ms", "type"):
            if field in given:
                assert same(given[field], getattr(value, field)), field
        for field in ("context", "adaptive_state"):
            if given.get(field) is not None:
                assert same(as_written(given[field]), getattr(value, field)), field
        if "confidence" in given:
            assert value.confidence == float(given["confidence"])
    elif name == "update_agent_topics" and value:
        agent = store.get_agent(given["agent_id"])
        assert agent is not None and same(as_written(list(given["topics"])), agent.topics)


def run_call(store: HubStore, name: str, kwargs: dict[str, Any],
             follow: dict[str, Any], pools: Pools) -> Any:
    method = getattr(store, name)
    if name == "ack_messages":
        return method(*follow["args"])
    value = method(**kwargs)
    if isinstance(value, MessageFeed):
        pools.add("cursor", value.cursor)
        return value.next(**follow)
    return value


# --- the test ----------------------------------------------------------------------

@pytest.fixture
def tables(store: HubStore) -> list[str]:
    return sorted(sa_inspect(store.engine).get_table_names())


@HOSTILE
@given(data=st.data())
def test_hostile_arguments(store: HubStore, tables: list[str], data: st.DataObject,
                           request: pytest.FixtureRequest) -> None:
    pools: Pools = request.node.__dict__.setdefault("hostile_pools", Pools())
    name = data.draw(st.sampled_from(sorted(METHODS)), label="method")
    kwargs, follow = draw_call(data, pools, name)
    before = snapshot(store, tables)
    try:
        value = run_call(store, name, kwargs, follow, pools)
    except HubStoreError as exc:
        after = snapshot(store, tables)
        changed = [b[0] for b, a in zip(before, after, strict=True) if b != a]
        assert not changed, f"{name} raised {exc!r} but changed {changed}"
        return
    except BaseException as exc:
        pytest.fail(f"{name}({_short(kwargs)}) raised {type(exc).__module__}."
                    f"{type(exc).__name__}: {str(exc)[:300]}")
    check_read_back(store, name, kwargs, value, pools)


def _short(kwargs: dict[str, Any]) -> str:
    return ", ".join(f"{k}={v!r:.120}" for k, v in kwargs.items())
