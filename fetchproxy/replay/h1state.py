"""The states of an HTTP/1.1 connection, the events that move them, and every transition.

The tables are the whole of the state machine that :class:`~fetchproxy.replay.connection.
H1Connection` runs (h11's ``_state.py`` in shape): what the client sends moves its state
(:data:`THEIR_STEPS`, by event), what the server sends moves the server's (:data:`OUR_STEPS`,
by :class:`Sent`), and after each step the pair settles by :data:`JOINT_STEPS` — a request to
answer, the next cycle of a kept-alive connection, a close — worked out once for every pair
(:data:`SETTLED`). A step the tables do not hold raises :class:`LocalProtocolError`.
"""

from __future__ import annotations

import enum
from typing import Final

from fetchproxy.replay.http1 import RequestHead


class LocalProtocolError(RuntimeError):
    """The server asked for a step its state does not allow (a bug, never the client's)."""


class State(enum.Enum):
    IDLE = "idle"
    """Client: no request begun. Server: no request to answer."""
    SEND_BODY = "send-body"
    """Client: its head is read, its body is arriving. Server: its head is sent, the body
    is streaming."""
    SEND_RESPONSE = "send-response"
    """Server: a request to answer, no head sent yet (``100 Continue`` may go out)."""
    DONE = "done"
    """The request is complete, or the answer is; the next cycle begins when both are."""
    MUST_CLOSE = "must-close"
    """Done, and the connection closes: nothing more is read or answered."""
    CLOSED = "closed"
    """Client: it closed its side."""
    SWITCHED = "switched"
    """A ``CONNECT`` was accepted: the bytes that follow belong to the tunnel."""
    ERROR = "error"
    """Client: it sent something that is not HTTP/1.1."""

    __hash__ = object.__hash__  # members are singletons: Enum's own hash is a Python call


class Sent(enum.Enum):
    """What the server sends, as the transition tables name it."""

    CONTINUE = "100 Continue"
    HEAD = "an answer's head"
    END = "the end of an answer's body"
    WHOLE = "a whole answer"
    TUNNEL = "200 to a CONNECT"
    REFUSAL = "an error answer"

    __hash__ = object.__hash__


class Request:
    """The head of a request with a body, read; the body follows in :class:`EndOfMessage`."""

    __slots__ = ("head",)

    def __init__(self, head: RequestHead) -> None:
        self.head = head


class EndOfMessage:
    """The request is complete: its whole body (``b""`` when it has none: then it is the only
    event of the request, which is all head)."""

    __slots__ = ("body",)

    def __init__(self, body: bytes) -> None:
        self.body = body


class ConnectionClosed:
    """The client closed its side, and every request it sent before has been handed out."""

    __slots__ = ()


class Wait(enum.Enum):
    NEED_DATA = "need data"
    """Nothing more until more bytes arrive."""
    PAUSED = "paused"
    """Nothing more until the answer in progress is done (or ever, once closing)."""


NEED_DATA: Final = Wait.NEED_DATA
PAUSED: Final = Wait.PAUSED
Event = Request | EndOfMessage | ConnectionClosed

S = State
THEIR_STEPS: Final[dict[State, dict[type[Event], State]]] = {
    S.IDLE: {Request: S.SEND_BODY, ConnectionClosed: S.CLOSED},
    S.SEND_BODY: {EndOfMessage: S.DONE},
    S.DONE: {ConnectionClosed: S.CLOSED},
    S.MUST_CLOSE: {ConnectionClosed: S.CLOSED},
    S.CLOSED: {ConnectionClosed: S.CLOSED},
    S.SWITCHED: {},
    S.ERROR: {},
}
"""The client's transitions, by what it sent (events)."""
OUR_STEPS: Final[dict[State, dict[Sent, State]]] = {
    S.IDLE: {Sent.REFUSAL: S.MUST_CLOSE},
    S.SEND_RESPONSE: {
        Sent.CONTINUE: S.SEND_RESPONSE,
        Sent.HEAD: S.SEND_BODY,
        Sent.WHOLE: S.DONE,
        Sent.TUNNEL: S.SWITCHED,
        Sent.REFUSAL: S.MUST_CLOSE,
    },
    S.SEND_BODY: {Sent.END: S.DONE},
    S.DONE: {},
    S.MUST_CLOSE: {},
    S.SWITCHED: {},
}
"""The server's transitions, by what it sends."""
JOINT_STEPS: Final[dict[tuple[State, State], tuple[State, State]]] = {
    (S.SEND_BODY, S.IDLE): (S.SEND_BODY, S.SEND_RESPONSE),  # a request to answer
    (S.DONE, S.DONE): (S.IDLE, S.IDLE),  # kept alive: the next request
    (S.DONE, S.MUST_CLOSE): (S.MUST_CLOSE, S.MUST_CLOSE),
    (S.DONE, S.SWITCHED): (S.SWITCHED, S.SWITCHED),
    (S.MUST_CLOSE, S.SWITCHED): (S.SWITCHED, S.SWITCHED),  # an HTTP/1.0 CONNECT
    (S.CLOSED, S.IDLE): (S.CLOSED, S.MUST_CLOSE),
    (S.CLOSED, S.DONE): (S.CLOSED, S.MUST_CLOSE),
}
"""(client, server) → (client, server), applied after every step until nothing changes;
before them, a connection not kept alive turns either side's DONE into MUST_CLOSE."""


def _settle(theirs: State, ours: State, *, keep_alive: bool) -> tuple[State, State]:
    """Where (client, server) end up after the state-triggered steps (JOINT_STEPS)."""
    while True:
        if not keep_alive:
            theirs = State.MUST_CLOSE if theirs is State.DONE else theirs
            ours = State.MUST_CLOSE if ours is State.DONE else ours
        settled = JOINT_STEPS.get((theirs, ours), (theirs, ours))
        if settled == (theirs, ours):
            return settled
        theirs, ours = settled


SETTLED: Final = {
    (theirs, ours, alive): _settle(theirs, ours, keep_alive=alive)
    for theirs in State
    for ours in State
    for alive in (True, False)
}
"""Every (client, server, kept alive) and where it settles: the tables, worked out once."""


def _read_whole(*, alive: bool) -> tuple[State, State]:
    """Where (client, server) are after a request without a body is read from the idle pair:
    its two steps (:class:`Request`, then :class:`EndOfMessage`), each settled."""
    theirs, ours = SETTLED[THEIR_STEPS[State.IDLE][Request], State.IDLE, alive]
    return SETTLED[THEIR_STEPS[theirs][EndOfMessage], ours, alive]


READ_WHOLE: Final = {alive: _read_whole(alive=alive) for alive in (True, False)}
"""(client, server) after a whole request read at once from (IDLE, IDLE), by kept alive."""
