"""With the network off a command opens only the network's own socket families (IPv4 and IPv6,
which reach loopback in the command's namespace, and netlink's route and socket-diagnostic
protocols); AF_VSOCK, AF_PACKET, AF_ALG, netlink's other protocols and the rest fail with EPERM.
Real bubblewrap and bantam's real seccomp filter, driven through the shell tool as the model
calls it; nothing is mocked."""
from __future__ import annotations

import json
import shutil
import sys

import pytest

from bantam.approval import Approvals
from bantam.config import Config
from bantam.sandbox import unavailable
from bantam.tools import ToolContext, make_toolbox

if unavailable():
    pytest.skip(f"bubblewrap cannot run here: {unavailable()}", allow_module_level=True)


def shell(command: str, **values) -> str:
    box = make_toolbox(["shell_exec"], ToolContext(Config(**values), approvals=Approvals(None)))
    return box.execute("shell_exec", json.dumps({"command": command})).content


# Each line opens one kind of socket and prints its name with "open" or the errno it failed with.
# The loopback lines also carry a byte across, so "open" means the family works, not just exists.
PROBE = r'''
import errno, socket
def attempt(name, make):
    try:
        make()
        print(name, "open")
    except OSError as e:
        print(name, errno.errorcode.get(e.errno, e.errno))
def loopback(family, host):
    server = socket.socket(family)
    server.bind((host, 0))
    server.listen(1)
    client = socket.create_connection(server.getsockname()[:2])
    client.sendall(b"x")
    assert server.accept()[0].recv(1) == b"x"
def pair(kind):
    a, b = socket.socketpair(socket.AF_UNIX, kind)
    a.send(b"p")
    assert b.recv(1) == b"p"
attempt("inet", lambda: loopback(socket.AF_INET, "127.0.0.1"))
attempt("inet6", lambda: loopback(socket.AF_INET6, "::1"))
attempt("netlink-route", lambda: socket.socket(socket.AF_NETLINK, socket.SOCK_RAW, 0))
attempt("netlink-sock-diag", lambda: socket.socket(socket.AF_NETLINK, socket.SOCK_RAW, 4))
attempt("unix-stream-pair", lambda: pair(socket.SOCK_STREAM))
attempt("unix", lambda: socket.socket(socket.AF_UNIX))
attempt("unix-dgram-pair", lambda: pair(socket.SOCK_DGRAM))
attempt("vsock", lambda: socket.socket(socket.AF_VSOCK, socket.SOCK_STREAM))
attempt("packet", lambda: socket.socket(socket.AF_PACKET, socket.SOCK_RAW))
attempt("alg", lambda: socket.socket(socket.AF_ALG, socket.SOCK_SEQPACKET))
attempt("netlink-netfilter", lambda: socket.socket(socket.AF_NETLINK, socket.SOCK_RAW, 12))
attempt("netlink-uevent", lambda: socket.socket(socket.AF_NETLINK, socket.SOCK_DGRAM, 15))
attempt("netlink-generic", lambda: socket.socket(socket.AF_NETLINK, socket.SOCK_RAW, 16))
attempt("tipc", lambda: socket.socket(30, socket.SOCK_RDM))
attempt("bluetooth", lambda: socket.socket(31, socket.SOCK_STREAM))
attempt("inet-pair", lambda: socket.socketpair(socket.AF_INET, socket.SOCK_STREAM))
'''

OPEN = ["inet", "inet6", "netlink-route", "netlink-sock-diag", "unix-stream-pair"]
REFUSED = ["unix", "unix-dgram-pair", "vsock", "packet", "alg", "netlink-netfilter",
           "netlink-uevent", "netlink-generic", "tipc", "bluetooth", "inet-pair"]


def _probe(tmp_path, **values) -> dict[str, str]:
    (tmp_path / "probe.py").write_text(PROBE)
    out = shell(f"{sys.executable} probe.py", sandbox="workspace", **values)
    assert out.endswith("exit: 0"), out
    return dict(line.split(" ", 1) for line in out.splitlines() if line.split(" ")[0] in OPEN + REFUSED)


def test_only_the_networks_own_families_open_with_the_network_off(home):
    got = _probe(home)
    assert got == {**{name: "open" for name in OPEN}, **{name: "EPERM" for name in REFUSED}}


def test_ordinary_network_tools_work_and_vsock_does_not(home):
    """What a developer runs with the network off keeps working: a server on loopback, curl
    reaching it, `ip` and `ss` reading the namespace, Node listing its interfaces; a vsock
    socket, which would reach a virtual machine's host, fails."""
    steps = [
        f"({sys.executable} -m http.server -b 127.0.0.1 8765 > /dev/null 2>&1 &)",
        "for i in $(seq 50); do curl -s -o /dev/null http://127.0.0.1:8765/ && break; sleep 0.1; done",
        "curl -s -o /dev/null -w 'CURL:%{http_code}\\n' http://127.0.0.1:8765/",
        "ip -br addr show lo",
        "ss -ltn | grep -c 127.0.0.1:8765 | sed 's/^/SS:/'",
        f"{sys.executable} -c 'import socket; socket.socket(socket.AF_VSOCK, socket.SOCK_STREAM)' "
        "2>&1 | tail -n 1",
    ]
    if shutil.which("node"):
        steps.append("node -e 'console.log(\"NODE:\" + Object.keys(require(\"os\").networkInterfaces()))'")
    out = shell("; ".join(steps), sandbox="workspace")
    assert "CURL:200" in out and "SS:1" in out, out
    assert "lo " in out and "127.0.0.1/8" in out, out
    assert "PermissionError: [Errno 1] Operation not permitted" in out, out
    if shutil.which("node"):
        assert "NODE:lo" in out, out
