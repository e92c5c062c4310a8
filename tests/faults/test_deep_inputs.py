"""A deeply nested list in any argument of any public store method (issue 26).

``x = []; for _ in range(500): x = [x]`` passed as an argument used to escape as a raw
RecursionError: the error message was built with ``repr()``. Every public method of
HubStore (and of AsyncHubStore, and of the message feeds they return), found by
introspection so that new methods are covered, is called once per argument it takes
with such a value there and valid values elsewhere. Each call must raise a
ValidationError with a short message and write nothing, unless DOCUMENTED says what
that argument does with any value instead.
"""

from __future__ import annotations

import hashlib
import inspect
from collections.abc import AsyncIterator, Callable, Iterator
from dataclasses import dataclass, field
from typing import Any, Unpack, get_args, get_origin, get_type_hints

import pytest
import pytest_asyncio
from sqlalchemy import inspect as sa_inspect
from sqlalchemy import text
from sqlalchemy.engine import URL

from hubstore import HubStore
from hubstore.aio import AsyncHubStore
from hubstore.errors import HubStoreError, ValidationError, describe

#: Deeper than the interpreter's recursion limit (1,000), so that any recursive repr,
#: comparison or encoding of it fails; the issue's 500 levels fail only on a deep stack.
DEPTH = 5_000
#: A message a person can read: the value is shown shortened.
MAX_MESSAGE = 400

#: (method, argument) -> why any value is taken there: these calls must not raise a
#: ValidationError (nor anything but a HubStoreError of the hub's rules).
#: "**name" is a keyword taken through ``**kwargs``; "*args" the extra positional ones.
_NUMBER = ("read as JavaScript's Number(): a list is NaN, so the default "
           "(docs/compatibility.md, 'Number arguments')")
_TRUTHY = "a flag read by its truth value, as Python does"
DOCUMENTED: dict[tuple[str, str], str] = {
    ("ack_messages", "*args"): "kept for the reference: acknowledges nothing, returns 0",
    ("ack_messages", "**kwargs"): "kept for the reference: acknowledges nothing, returns 0",
    **{("create_assign", name): _NUMBER for name in (
        "priority", "ttl_ms", "timeout_ms", "deadline_ms", "attempt", "retry_count",
        "max_retries")},
    **{("assign_async", f"**{name}"): _NUMBER for name in (
        "priority", "ttl_ms", "timeout_ms", "deadline_ms", "attempt", "retry_count",
        "max_retries")},
    **{(method, f"**{name}"): _NUMBER for method in ("update_assign_status", "retry_assign")
       for name in ("priority", "ttl_ms", "timeout_ms", "attempt", "retry_count",
                    "max_retries")},
    ("poll_for_agent", "max_messages"): _NUMBER,
    ("get_audit_messages_for_agent", "max_messages"): _NUMBER,
    ("list_assigns", "active_before_ms"): _NUMBER,
    ("list_assigns", "limit"): _NUMBER,
    ("update_reflexion_hit", "success"): _TRUTHY,
    ("unit_of_work", "write"): _TRUTHY,
    ("transaction", "write"): _TRUTHY,  # (the store methods' scope, as unit_of_work)
    ("open", "auto_migrate"): _TRUTHY,
}
#: ``**kwargs`` typed Any that take another method's keyword arguments (its docstring).
KEYWORDS_OF = {"assign_async": "create_assign"}
#: A keyword no method takes: refused wherever ``**kwargs`` has a fixed set of names.
UNKNOWN = "not_a_field"


def deep(depth: int = DEPTH) -> list[Any]:
    value: list[Any] = []
    for _ in range(depth):
        value = [value]
    return value


def public_methods(cls: type) -> list[str]:
    return sorted(name for name in dir(cls)
                  if not name.startswith("_") and callable(getattr(cls, name)))


@dataclass
class Case:
    method: str
    argument: str
    args: list[Any] = field(default_factory=list)
    kwargs: dict[str, Any] = field(default_factory=dict)

    def __str__(self) -> str:
        return f"{self.method}({self.argument}=<a list nested {DEPTH:,} deep>)"


def seed(store: HubStore, url: URL) -> dict[str, Any]:
    """One row of each kind, and a valid value for every required argument: by name,
    or by "method.name" where a name means different things."""
    store.register_agent("a1", "codex", topics=["t.a"])
    message = store.audit_log("event", "a1", "a1", "t.a", trace_id="tr1",
                              correlation_id="co1")
    job = store.create_assign("lead", "a1", job_id="j1")
    request = store.insert_human_request("a1", "approval", "ok?")
    entry = store.add_reflexion("pattern", "message", "solution")
    store.save_pipeline_state("team1", phase="plan")
    return {
        "agent_id": "a1", "cli": "codex", "topics": ["t.a"], "topic": "t.a",
        "type": "event", "from_agent": "a1", "to_agent": "a1", "id": entry.id,
        "correlation_id": "co1", "trace_id": "tr1", "message_id": message.id,
        "requester_agent": "a1", "kind": "approval", "prompt": "ok?",
        "request_id": request.request_id, "state": "accepted", "reason": "r",
        "supervisor_agent": "lead", "worker_agent": "a1", "job_id": "j1",
        "error_pattern": "pattern", "error_message": "message", "solution": "solution",
        "team_name": "team1", "older_than_ms": 365 * 86_400_000, "url": url,
        "listener": lambda event, job: None, "fn": lambda store: None,
        "get_message.id": message.id, "update_message_status.id": message.id,
        "update_message_status.status": "acked", "update_agent_status.status": "online",
        "update_assign_status.status": "running", "report_assign_result.status": "running",
        "jobs": [{"task": "t"}], "job": job, "attempt": 1,
        "finish_assign.status": "running", "key": "codex",
        "set_assign_limit.max_running": 2, "name": "nightly",
        "set_assign_schedule.every_ms": 60_000,
        "reports": [{"job_id": "j1", "status": "running"}],
        # never wait: a wait given a bad argument by mistake would last 30 s
        "wait_for_assign.timeout_s": 0, "wait_for_assigns.timeout_s": 0,
        "wait_for_result.timeout_s": 0,
        "next.timeout_s": 0,
    }


def _parameters(cls: type, name: str) -> list[inspect.Parameter]:
    """The parameters a caller passes to ``cls.name`` (its receiver left out: self, or
    the scope of a store method written as a service function)."""
    found = list(inspect.signature(getattr(cls, name)).parameters.values())
    if isinstance(inspect.getattr_static(cls, name), classmethod | staticmethod):
        return found
    return found[1:]


def _keywords(cls: type, name: str, param: inspect.Parameter) -> list[str]:
    """The keywords a ``**kwargs`` parameter takes (its TypedDict's, or another
    method's), or [] when it takes any."""
    hint = get_type_hints(getattr(cls, name), include_extras=True).get(param.name)
    if get_origin(hint) is Unpack:
        return sorted(get_type_hints(get_args(hint)[0]))
    if name in KEYWORDS_OF:
        taken = {p.name for p in _parameters(cls, name)}
        return sorted(p.name for p in _parameters(cls, KEYWORDS_OF[name])
                      if p.name not in taken and p.default is not p.empty)
    return []


def cases(cls: type, name: str, valid: dict[str, Any]) -> Iterator[Case]:
    """One call per argument of ``cls.name`` (each ``**kwargs`` keyword, an unknown one
    too): the deep list there, valid values in the arguments before it (by position)
    and in the other required ones, defaults elsewhere."""
    params = _parameters(cls, name)

    def value_for(p: inspect.Parameter) -> Any:
        for key in (f"{name}.{p.name}", p.name):
            if key in valid:
                return valid[key]
        if p.default is p.empty:
            pytest.fail(f"{cls.__name__}.{name}: no valid value for its required argument "
                        f"{p.name!r}: add one to seed() in {__name__}")
        return p.default

    def filled(skip: str) -> tuple[list[Any], dict[str, Any]]:
        """Valid values for every argument but ``skip``: positionally up to it."""
        args: list[Any] = []
        kwargs: dict[str, Any] = {}
        positional = True
        for p in params:
            if p.name == skip or p.kind in (p.VAR_POSITIONAL, p.VAR_KEYWORD):
                positional = False
                continue
            needed = p.default is p.empty or f"{name}.{p.name}" in valid
            if positional and p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD):
                args.append(value_for(p))
            elif needed:
                kwargs[p.name] = value_for(p)
        return args, kwargs

    for p in params:
        if p.kind is p.VAR_POSITIONAL:
            args, kwargs = filled(p.name)
            yield Case(name, f"*{p.name}", [*args, deep()], kwargs)
        elif p.kind is p.VAR_KEYWORD:
            keywords = _keywords(cls, name, p)
            for keyword in [*keywords, UNKNOWN] if keywords else [p.name]:
                args, kwargs = filled(p.name)
                label = f"**{keyword}" if keywords else f"**{p.name}"
                yield Case(name, label, args, {**kwargs, keyword: deep()})
        elif p.kind is p.KEYWORD_ONLY:
            args, kwargs = filled(p.name)
            yield Case(name, p.name, args, {**kwargs, p.name: deep()})
        else:  # at its own position, the arguments before it given positionally
            args, kwargs = filled(p.name)
            yield Case(name, p.name, [*args, deep()], kwargs)


def problem(case: Case, raised: Exception | None) -> str | None:
    """What is wrong with the outcome of ``case`` (None: as expected)."""
    reason = DOCUMENTED.get((case.method, case.argument))
    if reason is not None:
        # taken: the call goes on to its other rules (a queued job is not retried...)
        if raised is not None and (isinstance(raised, ValidationError)
                                   or not isinstance(raised, HubStoreError)):
            return (f"{case}: raised {type(raised).__name__}: {describe(str(raised), 200)}, "
                    f"but is documented to take it ({reason})")
        return None
    if raised is None:
        return f"{case}: took the value; expected a ValidationError"
    if not isinstance(raised, ValidationError):
        return f"{case}: raised {type(raised).__module__}.{type(raised).__name__}"
    message = str(raised)
    if len(message) > MAX_MESSAGE:
        return f"{case}: a message of {len(message):,} characters: {message[:120]}..."
    return None


def snapshot(store: HubStore) -> list[tuple[str, int, str]]:
    """Every table's row count and a hash of its rows."""
    found = []
    with store.engine.connect() as conn:
        for table in sorted(sa_inspect(store.engine).get_table_names()):
            selected = conn.execute(text(f'SELECT * FROM "{table}"'))
            rows = sorted(repr(tuple(row)) for row in selected)
            digest = hashlib.sha256("\n".join(rows).encode("utf-8", "surrogatepass"))
            found.append((table, len(rows), digest.hexdigest()))
    return found


def changed(before: list[tuple[str, int, str]], after: list[tuple[str, int, str]]
            ) -> list[str]:
    return [b[0] for b, a in zip(before, after, strict=True) if b != a]


def settle(value: Any) -> None:
    """Release what a documented call returned (a store, a unit of work)."""
    if isinstance(value, HubStore):
        value.close()
    elif hasattr(value, "__enter__") and hasattr(value, "__exit__"):
        with value:
            pass


# --- the tests -----------------------------------------------------------------------

def test_describe_shows_any_value_briefly_and_never_raises() -> None:
    class Hostile:
        def __repr__(self) -> str:
            raise RuntimeError("no repr")

    class Deep(list[Any]):
        pass

    assert describe(deep()) == f"[[[[[...]]]]] (a list nested {DEPTH + 1:,} levels deep)"
    assert describe({"k": deep(10)}) == "{'k': [[[[...]]]]} (a dict nested 12 levels deep)"
    assert describe(10**5000) == "<an integer of 16,610 bits>"  # str() refuses it
    assert describe(Hostile()) == "<Hostile object>"
    assert describe(Deep(deep(3))).startswith("Deep([[[[]]]])")
    assert describe("x" * 10_000) == "'" + "x" * 27 + "..." + "x" * 28 + "'"  # head, tail
    assert describe(["a", 1, None]) == "['a', 1, None]"  # as repr() where it is short
    assert describe(set(range(100_000))) == "{0, 1, 2, 3, 4, 5, 6, 7, ...}"


@pytest.mark.parametrize("call", [
    lambda s, key: s.find_reflexion("p", context={key: 1}),
    lambda s, key: s.find_reflexion_exact("p", context={key: 1}),
    lambda s, key: s.add_reflexion("p", "m", "s", context={key: 1}),
    lambda s, key: s.register_agent("a1", "codex", metadata={key: 1}),
    lambda s, key: s.audit_log("event", "a1", "a1", "t", payload={"k": {key: 1}}),
], ids=["find_reflexion", "find_reflexion_exact", "add_reflexion", "register_agent",
        "audit_log"])
def test_a_deeply_nested_tuple_as_a_dict_key_is_refused(
        store: HubStore, call: Callable[[HubStore, Any], Any]) -> None:
    key: tuple[Any, ...] = ()
    for _ in range(DEPTH):
        key = (key,)
    before = snapshot(store)
    with pytest.raises(ValidationError, match="nested 5,001 levels deep"):
        call(store, key)
    assert snapshot(store) == before


def outcome(target: Any, case: Case) -> tuple[Any, Exception | None]:
    """What ``target.method(...)`` returned, or what it raised."""
    try:
        return getattr(target, case.method)(*case.args, **case.kwargs), None
    except Exception as exc:
        return None, exc


def test_every_store_method_refuses_a_deep_list_in_every_argument(
        store: HubStore, db_url: URL) -> None:
    valid = seed(store, db_url)
    problems: list[str | None] = []
    called = 0
    for name in public_methods(HubStore):
        before = snapshot(store)
        documented: list[Case] = []
        for case in cases(HubStore, name, valid):
            if (case.method, case.argument) in DOCUMENTED:
                documented.append(case)  # after the check below (they may write)
                continue
            called += 1
            problems.append(problem(case, outcome(store, case)[1]))
        if written := changed(before, snapshot(store)):
            problems.append(f"{name}: a refused call changed {written}")
        for case in documented:
            called += 1
            value, raised = outcome(store, case)
            settle(value)
            problems.append(problem(case, raised))
    feed = store.message_feed("a1")
    for name in public_methods(type(feed)):
        for case in cases(type(feed), name, valid):
            called += 1
            problems.append(problem(case, outcome(feed, case)[1]))
    assert called > 200
    assert not any(problems), "\n".join(p for p in problems if p)


@pytest_asyncio.fixture
async def astore(store: HubStore) -> AsyncIterator[AsyncHubStore]:
    """An AsyncHubStore on the same database as ``store`` (opened on its URL)."""
    async with await AsyncHubStore.open(store.url) as opened:
        yield opened


@pytest.mark.asyncio
async def test_every_async_store_method_refuses_a_deep_list_in_every_argument(
        store: HubStore, astore: AsyncHubStore, db_url: URL) -> None:
    valid = seed(store, db_url)
    problems: list[str | None] = []
    before = snapshot(store)
    documented: list[Case] = []

    async def async_outcome(target: Any, case: Case) -> tuple[Any, Exception | None]:
        value, raised = outcome(target, case)
        if inspect.isawaitable(value):
            try:
                value = await value
            except Exception as exc:
                return None, exc
        return value, raised

    for name in public_methods(AsyncHubStore):
        for case in cases(AsyncHubStore, name, valid):
            if (case.method, case.argument) in DOCUMENTED:
                documented.append(case)
                continue
            value, raised = await async_outcome(astore, case)
            if isinstance(value, AsyncHubStore):
                await value.close()
            problems.append(problem(case, raised))
    if written := changed(before, snapshot(store)):
        problems.append(f"a refused call changed {written}")
    for case in documented:
        value, raised = await async_outcome(astore, case)
        if isinstance(value, AsyncHubStore):
            await value.close()
        elif hasattr(value, "__aenter__"):
            async with value:
                pass
        problems.append(problem(case, raised))
    feed = await astore.message_feed("a1")
    for name in public_methods(type(feed)):
        for case in cases(type(feed), name, valid):
            problems.append(problem(case, (await async_outcome(feed, case))[1]))
    assert not any(problems), "\n".join(p for p in problems if p)
