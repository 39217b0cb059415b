// A stand-in worker parent for the front's tests (the supply's, the pool's): a small
// Python script started in the zygote's place that speaks the channel, forks a child per
// request, reports each child's exit, and logs what it did. No interpreter with kcoral, no
// sandbox, no GPU: each child plays a worker as the group it was forked for says.
//
// It logs "parent PID", "fork PID GROUP", "no-fork GROUP" and "exit PID" lines to
// $FAKE_LOG (from --program-env, which the parent's environment gets). It cannot make the
// third fork of a group named "short" (as a zygote out of descriptors). A child of a group
// named "fail..." says it cannot start. A child of a set group (a group with a comma:
// several GPUs) first sleeps $FAKE_SET_START_S seconds (0 by default), then says it
// cannot start if $FAKE_SET_FAIL is set. A child that started says ready; with $FAKE_RUN
// set it runs each program it is sent (progress 0, the GPU lease asked for, granted and
// given back), answering with two returned values, "devices", its CUDA_VISIBLE_DEVICES (the
// group), and "connections", its CUDA connections, and says ready again; without, it holds every
// program it is sent. With $FAKE_MULTI_STREAM set, a child forked to refuse multi-stream
// calls says each of its programs had one (RunResult::multi_stream); with
// $FAKE_ALWAYS_MULTI_STREAM, every child says so, as a hostile worker may. With
// $FAKE_RERUN_FAIL, a child of one GPU and CUDA's default queues (a rerun worker of a
// one-queue pool) says it cannot start.
#pragma once

namespace kcoral::test {

constexpr const char* kFakeWorkerParent = R"(#!/usr/bin/env python3
import ctypes, json, os, select, signal, socket, sys, time
log = open(os.environ["FAKE_LOG"], "a", buffering=1)
log.write(f"parent {os.getpid()}\n")
channel = socket.socket(fileno=3)
def send(sock, message, fds=()):
    message = dict(message)
    # A result's values follow its object, after a newline, then its stdout and stderr.
    values = message.pop("results", None)
    tail = b""
    if values is not None:
        out, err = message.pop("stdout").encode(), message.pop("stderr").encode()
        message.update(stdout_bytes=len(out), stderr_bytes=len(err))
        tail = b"\n" + values.encode() + out + err
    frame = b"I" + json.dumps(message).encode() + tail
    try:
        if fds:
            socket.send_fds(sock, [frame], list(fds))
        else:
            sock.send(frame)
    except (BrokenPipeError, ConnectionResetError):
        pass  # the front is gone: the next read says so
def receive(sock):
    try:
        data, fds, _, _ = socket.recv_fds(sock, 1 << 16, 250)
    except ConnectionResetError:
        data, fds = b"", []
    for fd in fds:
        os.close(fd)
    if not data:
        os._exit(0)
    return json.loads(data[1:])
def run_programs(sock, group, fork):
    while True:
        if receive(sock)["type"] != "run":
            continue
        send(sock, {"type": "progress", "index": 0})
        send(sock, {"type": "lease", "acquire": True})
        while receive(sock)["type"] != "lease_granted":
            pass
        send(sock, {"type": "lease", "acquire": False})
        results = {"devices": {"type": "str", "value": group},
                   "connections": {"type": "int", "value": str(fork["cuda_connections"])}}
        multi_stream = bool(os.environ.get("FAKE_ALWAYS_MULTI_STREAM") or
                            (os.environ.get("FAKE_MULTI_STREAM") and fork["refuse_multi_stream"]))
        send(sock, {"type": "result", "continues": True, "results": json.dumps(results), "stdout": "",
                    "stdout_truncated": False, "stderr": "", "stderr_truncated": False, "elapsed_ms": 1.0,
                    "part_sizes": [], "retired": "", "multi_stream": multi_stream, "part_blobs": []})
        send(sock, {"type": "ready"})
def worker(sock, fork):
    group = fork["visible_devices"]
    if group.startswith("fail"):
        send(sock, {"type": "failed", "message": f"no device for {group}"})
        os._exit(1)
    if os.environ.get("FAKE_RERUN_FAIL") and fork["cuda_connections"] == 0 and "," not in group:
        send(sock, {"type": "failed", "message": f"no devices for {group}"})
        os._exit(1)
    if "," in group:
        time.sleep(float(os.environ.get("FAKE_SET_START_S", "0")))
        if os.environ.get("FAKE_SET_FAIL"):
            send(sock, {"type": "failed", "message": f"no devices for {group}"})
            os._exit(1)
    send(sock, {"type": "ready"})
    if os.environ.get("FAKE_RUN"):
        run_programs(sock, group, fork)
    while sock.recv(1 << 20, socket.MSG_TRUNC):
        pass
    os._exit(0)
send(channel, {"type": "zygote_ready", "versions": {"python": "fake", "parent": str(os.getpid())}, "fork_parents": []})
children = {}  # pidfd: pid
forks_asked = {}  # group: how many
while True:
    readable, _, _ = select.select([channel] + list(children), [], [])
    for fd in readable:
        if fd is channel:
            try:
                data = channel.recv(65536)
            except ConnectionResetError:
                data = b""
            if not data:
                for pid in children.values():
                    os.kill(pid, signal.SIGKILL)
                    os.waitpid(pid, 0)
                sys.exit(0)
            message = json.loads(data[1:])
            if message["type"] != "fork":
                continue
            group = message["visible_devices"]
            forks_asked[group] = forks_asked.get(group, 0) + 1
            if group == "short" and forks_asked[group] == 3:
                log.write(f"no-fork {group}\n")
                send(channel, {"type": "fork_failed", "message": "socketpair: Too many open files"})
                continue
            front, end = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
            parent = os.getpid()
            pid = os.fork()
            if pid == 0:
                ctypes.CDLL(None).prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG: not outliving a killed parent
                if os.getppid() != parent:
                    os._exit(0)
                os.setsid()
                channel.close()
                front.close()
                worker(end, message)
            end.close()
            pidfd = os.pidfd_open(pid)
            children[pidfd] = pid
            log.write(f"fork {pid} {message['visible_devices']}\n")
            send(channel, {"type": "forked", "pid": pid}, [front.fileno(), pidfd])
            front.close()
        else:
            pid = children.pop(fd)
            os.close(fd)
            _, status = os.waitpid(pid, 0)
            log.write(f"exit {pid}\n")
            if os.WIFSIGNALED(status):
                send(channel, {"type": "exited", "pid": pid, "signal": os.WTERMSIG(status)})
            else:
                send(channel, {"type": "exited", "pid": pid, "exit_code": os.WEXITSTATUS(status)})
)";

}  // namespace kcoral::test
