"""The parent's handle on one worker process: start it, hand it one step of a run at a time, read its reply.

A worker is a fresh interpreter (`worker.py`, never a fork of the training process) started with a scrubbed
environment and one unix socket. A step's files (the program and its stdin as memory files, the judge's spec and
result pipes) travel with the request as descriptors (SCM_RIGHTS); the replies are framed JSON (`wire.frame`).
"""

from __future__ import annotations

import json
import os
import selectors
import signal
import socket
import subprocess
import sys
import time

from . import jobs as J
from . import watch, wire
from .cleanup import kill_uid

_WORKER = os.path.join(os.path.dirname(os.path.abspath(__file__)), "worker.py")


class SandboxError(RuntimeError):
    """The sandbox itself failed (a worker that cannot start), not the program under test."""


class Worker:
    """Parent-side handle of one fork-server process."""

    def __init__(self, config: dict):
        env = {
            "PATH": "/usr/local/bin:/usr/bin:/bin",
            "LANG": "C.UTF-8",
            "LC_ALL": "C.UTF-8",
            "USER": "sandbox",
            "LOGNAME": "sandbox",
            "HOME": "/nonexistent",
            # glibc and BLAS reserve address space per thread; keep them small under RLIMIT_AS
            "MALLOC_ARENA_MAX": "2",
            "OMP_NUM_THREADS": "1",
            "OPENBLAS_NUM_THREADS": "1",
            "MKL_NUM_THREADS": "1",
        }
        ours, theirs = socket.socketpair()
        self.proc = subprocess.Popen(
            [sys.executable, "-I", "-S", "-B", _WORKER, "--serve", json.dumps(dict(config, fd=theirs.fileno()))],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            env=env,
            cwd="/",
            close_fds=True,
            pass_fds=(theirs.fileno(),),
            start_new_session=True,
        )
        theirs.close()
        self.sock = ours
        ours.setblocking(False)
        self.rbuf = bytearray()
        self.run = self.step = None
        self.retire = False  # the worker said it cannot serve another run (its init or judge factory died)
        self.deadline = self.started = 0.0
        self.caps: dict = {}

    def wait_ready(self, timeout: float = 60.0) -> None:
        deadline = time.monotonic() + timeout
        with selectors.DefaultSelector() as sel:
            sel.register(self.sock, selectors.EVENT_READ)
            while True:
                left = deadline - time.monotonic()
                if left <= 0 or not sel.select(left):
                    self.stop(force=True)
                    raise SandboxError("a sandbox worker did not start within 60 s")
                try:
                    reply = self._receive()
                except (EOFError, OSError) as e:
                    raise SandboxError(f"a sandbox worker died while starting ({e}); run it by hand to see why") from e
                if reply is not None:
                    self.caps = reply
                    return

    # -- one step of a run: the request (with the judge's pipe ends), the spec to the judge, the two answers

    def submit(self, run, step: dict, sel, grace: float) -> None:
        self.run, self.step = run, step
        self.reply = self.result = None
        # what the parent holds of one step, at most: the worker's reply and the judge's result, each capped before
        # it is decoded (a plus job's judge sends three numbers; an inside plus run's outputs scale with the
        # reference's)
        self.reply_cap = int(step.get("reply_cap") or J.REPORT_CAP_BYTES + (1 << 20))
        self.result_cap = int(step.get("result_cap") or J.REPORT_CAP_BYTES)
        self.result_over = False
        request = dict(step["request"])
        # the program and its stdin go to the child in memory files the worker passes on unread: no program, input or
        # test ever sits in the worker's memory, where a later program forked from it could find it
        program = request.pop("program").encode("utf-8", "surrogatepass")
        request["program_bytes"] = len(program)  # the child checks it read all of it, from the start
        self.fds, names = [memfile("program", program)], ["program"]
        stdin = request.pop("stdin", None)
        if stdin is not None:
            self.fds.append(memfile("stdin", stdin))
            names.append("stdin")
        self.spec_w = self.result_r = self.kill_w = None
        # the program's stdout and stderr (and an inside run's report) come here straight from the child: the worker
        # passes the write ends on and never reads a byte, so no output ever sits in the memory of the process that
        # forks every later program. The worker kills the program when the parent writes to the kill pipe.
        self.streams = {}
        inside = request["kind"] != "function"
        self.token = os.urandom(16).hex() if inside else None
        if inside:
            request["token"] = self.token
        for name in ("stdout", "stderr", "tamper", "report") if inside else ("stdout", "stderr", "tamper"):
            r, w = os.pipe()
            os.set_blocking(r, False)
            self.fds.append(w)
            names.append(name)
            self.streams[name] = r
        self.bufs = {name: bytearray() for name in self.streams}
        self.out_total, self.overflow, self.report_overflow = 0, False, False
        self.out_cap = int(request["cap"])
        self.report_cap = int(step.get("reply_cap") or watch.REPORT_CAP_BYTES)
        kill_r, self.kill_w = os.pipe()
        self.fds.append(kill_r)
        names.append("kill")
        if step.get("spec") is not None:
            spec_r, self.spec_w = os.pipe()
            self.result_r, result_w = os.pipe()
            self.fds += [spec_r, result_w]
            names += ["spec", "result"]
            self.spec_buf = bytearray(step["spec"])
            self.result_buf = bytearray()
            os.set_blocking(self.spec_w, False)
            os.set_blocking(self.result_r, False)
        self.wbuf = bytearray(wire.frame(dict(request, fds=names)))
        self.started = time.monotonic()
        self.deadline = self.started + step["budget"] + grace
        self._flush()
        if self.wbuf:
            sel.modify(self.sock, selectors.EVENT_READ | selectors.EVENT_WRITE, (self, "sock"))
        if self.spec_w is not None:
            sel.register(self.spec_w, selectors.EVENT_WRITE, (self, "spec"))
            sel.register(self.result_r, selectors.EVENT_READ, (self, "result"))
        for name, fd in self.streams.items():
            sel.register(fd, selectors.EVENT_READ, (self, name))

    def _flush(self) -> None:
        while self.wbuf:
            try:
                if self.fds:
                    n = socket.send_fds(self.sock, [bytes(self.wbuf[:65536])], self.fds)
                    for fd in self.fds:
                        os.close(fd)  # the worker has its own copies now; ours would keep the pipes open
                    self.fds = []
                else:
                    n = self.sock.send(self.wbuf)
            except BlockingIOError:
                return
            del self.wbuf[:n]

    def on_event(self, what: str, events: int, sel) -> None:
        if what == "sock":
            if events & selectors.EVENT_WRITE:
                self._flush()
                if not self.wbuf:
                    sel.modify(self.sock, selectors.EVENT_READ, (self, "sock"))
            if events & selectors.EVENT_READ:
                reply = self._receive()
                if reply is not None:
                    self.reply = reply
        elif what == "spec":
            try:
                n = os.write(self.spec_w, self.spec_buf[: 1 << 20])
                del self.spec_buf[:n]
            except BlockingIOError:
                pass
            except OSError:  # the judge died before reading it all: its result says so
                self.spec_buf.clear()
            if not self.spec_buf:
                sel.unregister(self.spec_w)
                os.close(self.spec_w)
                self.spec_w = None
        elif what in ("stdout", "stderr", "report", "tamper"):
            self._read_stream(what, sel)
        elif what == "result":
            chunk = os.read(self.result_r, 1 << 20)
            if chunk and len(self.result_buf) + len(chunk) <= self.result_cap:
                self.result_buf += chunk
            elif chunk:
                self.result_over = True  # read on, keep nothing: the judge is not left blocked on a full pipe
                self.result_buf.clear()
            else:
                sel.unregister(self.result_r)
                os.close(self.result_r)
                self.result_r = None
                self.result = (
                    bytes(self.result_buf)
                    if not self.result_over
                    else json.dumps(
                        {"exc": f"the judge's result exceeded {self.result_cap} bytes", "exc_type": "OverflowError"}
                    ).encode()
                )

    def _read_stream(self, name: str, sel) -> None:
        """Read what the program wrote, keeping at most its cap: stdout (and stderr's last 4 KB) up to the output
        cap together, the report up to its cap. Past a cap the program is killed (the worker watches the kill
        pipe) and the rest is read and dropped, so the parent never holds more than the caps."""
        fd = self.streams[name]
        try:
            chunk = os.read(fd, 1 << 16)
        except BlockingIOError:
            return
        if not chunk:
            sel.unregister(fd)
            os.close(fd)
            del self.streams[name]
            return
        buf = self.bufs[name]
        if name == "tamper":
            buf += chunk[: max(0, 4096 - len(buf))]
            return
        if name == "report":
            if len(buf) + len(chunk) > self.report_cap:
                self.overflow = self.report_overflow = True
                self._kill()
            elif not self.report_overflow:
                buf += chunk
            return
        self.out_total += len(chunk)
        if self.out_total > self.out_cap:
            self.overflow = True
            self._kill()
        if name == "stdout":
            buf += chunk[: max(0, self.out_cap - len(buf))]
        else:
            buf += chunk
            del buf[:-4096]

    def _kill(self) -> None:
        if self.kill_w is not None:
            try:
                os.write(self.kill_w, b"k")
            except OSError:
                pass

    def complete(self) -> bool:
        return self.reply is not None and self.result_r is None and not self.streams

    def _replies(self) -> dict:
        """The worker's reply with what the parent read itself: the outputs, and for an inside run the verdict
        from its report (`watch.inside_verdict`: no token, no pass)."""
        reply = dict(self.reply)
        if self.reply.get("status") is not None and "wstatus" not in self.reply:
            return reply  # the worker's own error: no run to speak of
        stdout = bytes(self.bufs["stdout"]).decode("utf-8", "replace")
        stderr = bytes(self.bufs["stderr"]).decode("utf-8", "replace")
        reply.update(stdout=stdout, stderr=stderr, tamper=bytes(self.bufs["tamper"]).decode("ascii", "replace"))
        if reply.get("kind") == "function":
            reply["overflow"] = self.overflow
            return reply
        wstatus = reply.get("wstatus")
        if type(wstatus) is not int or not 0 <= wstatus < 1 << 16:
            return {"status": "error", "detail": "malformed reply: wstatus is not an exit status"}
        timed_out = reply.get("timed_out") is True
        cap = watch.REPORT_CAP_BYTES if self.report_overflow else self.out_cap
        result = watch.inside_verdict(
            bytes(self.bufs["report"]),
            self.token.encode(),
            wstatus,
            timed_out,
            self.overflow,
            cap,
            stderr,
            reply.get("kind") == "stdio",
        )
        out = dict(
            status=result["status"],
            detail=result["detail"],
            duration_s=reply.get("duration_s", 0.0),
            stdout=stdout,
            tests_passed=result["passed"],
            tests_total=result["total"],
            done=result["done"],
        )
        if result.get("outputs") is not None and not timed_out:
            out["outputs"] = result["outputs"]
        out["tamper"] = reply["tamper"]
        if os.WIFSIGNALED(wstatus) and os.WTERMSIG(wstatus) == signal.SIGSYS:
            out["tamper"] += "\nseccomp"  # the system-call filter killed it: it made a call no solution needs
        if result["detail"].startswith("exited before the tests finished") or (
            result["detail"].startswith("exited with status") and reply.get("kind") != "stdio"
        ):
            out["tamper"] += "\nexit"  # a program that leaves before its tests ran to the end
        return out

    def finish(self, sel):
        run = self.run
        self.release(sel)
        self.retire = self.retire or self.reply.get("retire") is True
        if self.reply.get("unrun") is True and run.requeued < 2:
            run.requeued += 1  # the worker could not run it: the pool gives it to a fresh worker
        else:
            run.feed(self._replies(), self.result)
        self.run = None
        return run

    def release(self, sel) -> None:
        """Close this step's pipes (a replaced worker's too)."""
        for attr in ("spec_w", "result_r", "kill_w"):
            fd = getattr(self, attr, None)
            if fd is not None:
                try:
                    sel.unregister(fd)
                except (KeyError, ValueError):
                    pass
                os.close(fd)
                setattr(self, attr, None)
        for fd in getattr(self, "streams", {}).values():
            try:
                sel.unregister(fd)
            except (KeyError, ValueError):
                pass
            os.close(fd)
        self.streams = {}
        for fd in getattr(self, "fds", []):
            os.close(fd)
        self.fds = []
        try:
            sel.modify(self.sock, selectors.EVENT_READ, (self, "sock"))
        except (KeyError, ValueError, OSError):
            pass

    def _receive(self) -> dict | None:
        while True:
            try:
                chunk = self.sock.recv(1 << 20)
            except BlockingIOError:
                break
            if not chunk:
                raise EOFError(f"exit status {self.proc.poll()}")
            self.rbuf += chunk
        if len(self.rbuf) >= wire.FRAME.size:
            (n,) = wire.FRAME.unpack_from(self.rbuf)
            if n > J.REPORT_CAP_BYTES + (1 << 20):
                raise EOFError("the worker sent an oversized reply")
            if n > getattr(self, "reply_cap", n) and len(self.rbuf) >= wire.FRAME.size + n:
                del self.rbuf[: wire.FRAME.size + n]  # never decoded: an error verdict instead
                return {"status": "error", "detail": f"the run's reply exceeded {self.reply_cap} bytes"}
            if len(self.rbuf) >= wire.FRAME.size + n:
                body = bytes(self.rbuf[wire.FRAME.size : wire.FRAME.size + n])
                del self.rbuf[: wire.FRAME.size + n]
                try:
                    reply = wire.loads(body)
                except wire.WireError as e:
                    raise EOFError(f"the worker sent a malformed reply ({e})") from None
                return reply if type(reply) is dict else {"status": "error", "detail": "malformed worker reply"}
        return None

    def stop(self, force: bool = False) -> None:
        """End the worker; force: it may be stuck, so kill it (its namespaces and programs die with it)."""
        try:
            if not force and self.proc.poll() is None:
                self.sock.close()  # EOF: the worker cleans up and exits
                self.proc.wait(timeout=5)
        except Exception:  # subprocess.TimeoutExpired, OSError (no import here: this also runs at exit)
            pass
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()
        for uid in (self.caps.get("uid"), self.caps.get("judge_uid")):
            if uid is not None:
                kill_uid(uid)
        try:
            self.sock.close()
        except OSError:
            pass
        for cgroup in self.caps.get("cgroups", []):
            for _ in range(50):
                try:
                    os.rmdir(cgroup)
                    break
                except FileNotFoundError:
                    break
                except OSError:
                    time.sleep(0.01)  # the last process is still leaving


def memfile(name: str, text: str | bytes) -> int:
    """A memory file holding `text`, at offset 0 (a regular file: `os.fstat(0).st_size` works on stdin)."""
    fd = os.memfd_create(name, os.MFD_CLOEXEC)
    data = text if isinstance(text, bytes) else text.encode("utf-8", "surrogatepass")
    while data:
        data = data[os.write(fd, data) :]
    os.lseek(fd, 0, os.SEEK_SET)
    return fd
