"""The judge's end of the program's socket: `Channel` (one call out, one plain-data answer back, under a size cap and
a deadline) and `Proxy` (what the tests call in place of the entry point), with the exceptions a call ends in.
Standard library only; runs in the judge process.
"""

from __future__ import annotations

import builtins
import os
import select
import time

from . import wire

REPLY_CAP_BYTES = 256 << 20  # one answer of the program beyond this ends the run (an error, not a verdict)


class ProgramDied(BaseException):  # noqa: N818 - not an Exception: a test's `except Exception` must not swallow it
    """The program stopped answering: it exited, crashed, was killed, or broke the protocol."""


class CallTimeout(ProgramDied):
    """One call of a "calls" job ran past its own time budget."""


class ProgramError(Exception):
    """The program raised an exception whose type is not a builtin (its class lives in the program)."""


class NotPlainData(Exception):  # noqa: N818
    """The program answered with something other than plain data."""


class Channel:
    """Calls into the program over a connected socket: one framed JSON request, one framed JSON reply."""

    def __init__(self, fd: int, cap: int = REPLY_CAP_BYTES):
        self.fd, self.cap = fd, cap
        self.calls = 0
        self.deadline: float | None = None  # a "calls" job: when the current call's answer must have come
        self.truthy = False  # a returned object that is not plain data crosses as its truth value (TRUTHY_TASKS)

    def _read(self, n: int) -> bytes:
        buf = bytearray()
        while len(buf) < n:
            if self.deadline is not None:
                left = self.deadline - time.monotonic()
                if left <= 0 or not select.select([self.fd], [], [], left)[0]:
                    raise CallTimeout("time limit exceeded")
            try:
                chunk = os.read(self.fd, min(n - len(buf), 1 << 20))
            except OSError as e:
                raise ProgramDied(f"the program's channel broke ({e.strerror})") from None
            if not chunk:
                raise ProgramDied("the program stopped answering")
            buf += chunk
        return bytes(buf)

    def recv(self):
        (n,) = wire.FRAME.unpack(self._read(wire.FRAME.size))
        if n > self.cap:
            raise ProgramDied(f"the program answered {n} bytes (more than {self.cap})")
        try:
            msg = wire.loads(self._read(n))
        except wire.WireError as e:
            raise ProgramDied(f"the program broke the protocol: {e}") from None
        if type(msg) is not dict:
            raise ProgramDied("the program broke the protocol: a reply that is not an object")
        return msg

    def send(self, obj) -> None:
        data = wire.frame(obj)
        try:
            while data:
                data = data[os.write(self.fd, data) :]
        except OSError:
            raise ProgramDied("the program stopped answering") from None

    def call(self, name: str, args: tuple, kwargs: dict, digest_over: int | None = None, mutations: bool = True):
        """The program's answer to name(*args, **kwargs): a plain value, with mutated list/dict/set arguments
        updated in place; a raised exception re-raised here (builtin types as themselves). digest_over (plus
        inputs): return the reply's tree unchanged (large outputs come as digests, a raise as {"e": name})."""
        try:
            request = {"f": name, "a": wire.encode(list(args))}
            if kwargs:
                request["k"] = wire.encode(dict(kwargs))
        except wire.WireError as e:
            raise NotPlainData(f"an argument of {name}() cannot be sent to the program: {e}") from None
        if digest_over is not None:
            request["o"] = digest_over
        if not mutations:
            request["n"] = 1  # the caller keeps no argument: no mutated copies back
        if self.truthy:
            request["t"] = 1
        self.calls += 1
        self.send(request)
        reply = self.recv()
        if "r" in reply and digest_over is not None:
            try:
                wire.decode(reply["r"], extra="h")
            except wire.WireError as e:
                raise NotPlainData(f"{name}() returned something that is not plain data: {e}") from None
            return reply["r"]
        if "r" in reply:
            try:
                value = wire.decode(reply["r"])
                mutated = [wire.decode(m) for m in reply.get("m") or []]
            except (wire.WireError, TypeError) as e:
                raise NotPlainData(f"{name}() returned something that is not plain data: {e}") from None
            if mutated and len(mutated) == len(args):
                for old, new in zip(args, mutated, strict=True):
                    _update(old, new)
            return value
        if type(reply.get("x")) is str and type(reply.get("msg", "")) is str:
            raise _exception(reply["x"], reply.get("msg", ""))
        if type(reply.get("n")) is str:
            raise NotPlainData(f"{name}() {reply['n'][:200]}")
        raise ProgramDied("the program broke the protocol: an unknown reply")


def _exception(type_name: str, message: str) -> Exception:
    """A raised exception as the judge sees it: a builtin type by name, anything else a ProgramError."""
    cls = getattr(builtins, type_name[:60], None)
    if isinstance(cls, type) and issubclass(cls, Exception):
        try:
            return cls(message[:500])
        except Exception:
            pass
    return ProgramError(f"{type_name[:60]}: {message[:300]}")


def _update(old, new) -> None:
    """Make a mutable argument equal to the program's version of it after the call, keeping its identity."""
    if type(old) is list and type(new) is list:
        if len(old) == len(new):
            for i, (o, n) in enumerate(zip(old, new, strict=True)):
                if type(o) is type(n) and type(o) in (list, dict, set):
                    _update(o, n)
                elif o != n or type(o) is not type(n):
                    old[i] = n
        else:
            old[:] = new
    elif type(old) in (dict, set) and type(new) is type(old):
        old.clear()
        old.update(new)


class Proxy:
    """What the tests call in place of the candidate's function."""

    def __init__(self, channel: Channel, name: str):
        self._channel, self.__name__ = channel, name

    def __call__(self, *args, **kwargs):
        return self._channel.call(self.__name__, args, kwargs)

    def __repr__(self) -> str:
        return f"<the program's {self.__name__}>"
