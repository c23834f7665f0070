"""The seccomp filter that closes every socket family but the network's own to a sandboxed command
with the network off.

`--unshare-net` gives the command a network namespace of its own, holding only loopback, so IPv4
and IPv6 reach nothing outside. Other socket families are not held by that namespace. A Unix
socket is a file: a command that can create an AF_UNIX socket can connect to any socket it can
see (a desktop's session bus, docker.sock, ssh-agent, a database's peer login) and send what it
read through it. AF_VSOCK reaches the hypervisor's host from a virtual machine's guest, whatever
the namespace. The rest (AF_PACKET, AF_ALG, AF_BLUETOOTH, AF_TIPC, netlink's other protocols, ...)
are kernel code no ordinary command needs, and the way in of many kernel exploits. Like
Anthropic's sandbox-runtime on Linux, bantam hands bubblewrap (`--seccomp FD`) a classic BPF
program that lets a command create only the sockets it needs and makes every other socket call
fail with EPERM:

    socket(AF_INET | AF_INET6, ...)        allowed: loopback inside the command's own namespace
    socket(AF_NETLINK, *, NETLINK_ROUTE)   allowed: the namespace's own addresses and routes,
                                           which getifaddrs, glibc's getaddrinfo(AI_ADDRCONFIG),
                                           `ip`, `hostname -I` and Node's os.networkInterfaces
                                           read (without it the last three fail, and a dev server
                                           that lists its addresses dies)
    socket(AF_NETLINK, *, NETLINK_SOCK_DIAG)  allowed: the namespace's own sockets, which `ss`
                                           lists ("is my server listening?")
    socket(any other family, ...)          refused, AF_UNIX and AF_VSOCK among them; so is
                                           netlink's every other protocol (netfilter, audit,
                                           uevents, generic netlink, ...)
    socketpair(AF_UNIX, SOCK_DGRAM, ...)   a datagram pair can still `sendto` any named socket;
                                           stream and seqpacket pairs are connected to each other
                                           only, and programs use them (asyncio, ssh, many
                                           event loops), so they stay allowed; a pair of any
                                           other family is refused
    socketcall(SYS_SOCKET|SYS_SOCKETPAIR)  32-bit x86 creates sockets through this multiplexer,
                                           whose arguments a filter cannot read: both are refused
    io_uring_setup                         io_uring can create and connect sockets without a
                                           socket() call (IORING_OP_SOCKET); programs fall back
                                           to ordinary calls

The filter knows the machine's own calling conventions and the 32-bit one beside it (x86_64 with
its x32 numbers and i386; aarch64 and arm). A call from any other architecture kills the process,
as libseccomp does by default: an unknown convention would bypass every check above. On a machine
whose architecture is not in the table there is no filter (`program` returns None) and
Sandbox.describe says so.

The program is built with struct, following <linux/filter.h> and <linux/seccomp.h>: struct
sock_filter is {u16 code; u8 jt; u8 jf; u32 k}, and struct seccomp_data starts with
{int nr; u32 arch; u64 ip; u64 args[6]}."""
from __future__ import annotations

import functools
import os
import struct
from dataclasses import dataclass

# BPF instruction classes and modes (linux/bpf_common.h)
_LD_W_ABS = 0x00 | 0x00 | 0x20    # BPF_LD | BPF_W | BPF_ABS: A = the 32-bit word at offset k
_ALU_AND_K = 0x04 | 0x50 | 0x00   # BPF_ALU | BPF_AND | BPF_K: A &= k
_JEQ_K = 0x05 | 0x10 | 0x00       # BPF_JMP | BPF_JEQ | BPF_K
_RET_K = 0x06 | 0x00              # BPF_RET | BPF_K

# seccomp return values (linux/seccomp.h)
RET_ALLOW = 0x7FFF0000
RET_KILL_PROCESS = 0x80000000
RET_EPERM = 0x00050000 | 1        # SECCOMP_RET_ERRNO | EPERM

# offsets in struct seccomp_data; args are u64 and the machines here are little-endian, so the
# low 32 bits of argument i are at 16 + 8 * i
_NR, _ARCH = 0, 4


def _arg_low(i: int) -> int:
    return 16 + 8 * i


AF_UNIX, AF_INET, AF_INET6, AF_NETLINK = 1, 2, 10, 16
NETLINK_ROUTE, NETLINK_SOCK_DIAG = 0, 4
# the families a command may open with the network off; AF_NETLINK only with these protocols
OPEN_FAMILIES = (AF_INET, AF_INET6)
NETLINK_PROTOCOLS = (NETLINK_ROUTE, NETLINK_SOCK_DIAG)
SOCK_DGRAM = 2
SOCK_TYPE_MASK = 0xF              # the type without SOCK_NONBLOCK and SOCK_CLOEXEC
SYS_SOCKET, SYS_SOCKETPAIR = 1, 8  # socketcall's first argument (linux/net.h)
X32_BIT = 0x40000000              # x32 calls are x86_64 calls with this bit set


@dataclass(frozen=True)
class Abi:
    """One calling convention: its AUDIT_ARCH value and its call numbers (None: no such call)."""
    audit_arch: int
    socket: int
    socketpair: int
    io_uring_setup: int
    socketcall: int | None = None
    nr_mask: int = 0xFFFFFFFF     # applied to nr first (x86_64: folds x32 numbers onto the 64-bit)


X86_64 = Abi(0xC000003E, socket=41, socketpair=53, io_uring_setup=425, nr_mask=~X32_BIT & 0xFFFFFFFF)
I386 = Abi(0x40000003, socket=359, socketpair=360, io_uring_setup=425, socketcall=102)
AARCH64 = Abi(0xC00000B7, socket=198, socketpair=199, io_uring_setup=425)
ARM = Abi(0x40000028, socket=281, socketpair=288, io_uring_setup=425)
# uname's machine -> the conventions a process on it may use
MACHINES = {"x86_64": (X86_64, I386), "amd64": (X86_64, I386), "aarch64": (AARCH64, ARM),
            "arm64": (AARCH64, ARM)}


class _Asm:
    """A few BPF instructions with named jump targets (BPF jumps are relative, forward only)."""

    def __init__(self) -> None:
        self.code: list[tuple[int, str | int, str | int, int]] = []
        self.labels: dict[str, int] = {}

    def label(self, name: str) -> None:
        self.labels[name] = len(self.code)

    def op(self, code: int, k: int, jt: str | int = 0, jf: str | int = 0) -> None:
        self.code.append((code, jt, jf, k))

    def bytes(self) -> bytes:
        out = []
        for at, (code, jt, jf, k) in enumerate(self.code):
            out.append(struct.pack("=HBBI", code, self._rel(at, jt), self._rel(at, jf), k))
        return b"".join(out)

    def _rel(self, at: int, target: str | int) -> int:
        if isinstance(target, int):
            return target
        offset = self.labels[target] - at - 1
        assert 0 <= offset < 256, f"jump to {target} out of range"
        return offset


def _abi_block(asm: _Asm, abi: Abi, tag: str) -> None:
    """For one convention: refuse the calls in the module's table, allow every other."""
    asm.label(tag)
    asm.op(_LD_W_ABS, _NR)
    if abi.nr_mask != 0xFFFFFFFF:
        asm.op(_ALU_AND_K, abi.nr_mask)
    asm.op(_JEQ_K, abi.socket, jt=f"{tag}.socket")
    asm.op(_JEQ_K, abi.socketpair, jt=f"{tag}.pair")
    asm.op(_JEQ_K, abi.io_uring_setup, jt="deny")
    if abi.socketcall is not None:
        asm.op(_JEQ_K, abi.socketcall, jt=f"{tag}.socketcall")
    asm.op(_RET_K, RET_ALLOW)
    asm.label(f"{tag}.socket")                     # socket(domain, type, protocol)
    asm.op(_LD_W_ABS, _arg_low(0))
    for family in OPEN_FAMILIES:
        asm.op(_JEQ_K, family, jt="allow")
    asm.op(_JEQ_K, AF_NETLINK, jf="deny")
    asm.op(_LD_W_ABS, _arg_low(2))
    for protocol in NETLINK_PROTOCOLS:
        asm.op(_JEQ_K, protocol, jt="allow")
    asm.op(_RET_K, RET_EPERM)
    asm.label(f"{tag}.pair")                       # socketpair(domain, type, ...)
    asm.op(_LD_W_ABS, _arg_low(0))
    asm.op(_JEQ_K, AF_UNIX, jf="deny")
    asm.op(_LD_W_ABS, _arg_low(1))
    asm.op(_ALU_AND_K, SOCK_TYPE_MASK)
    asm.op(_JEQ_K, SOCK_DGRAM, jt="deny", jf="allow")
    if abi.socketcall is not None:                 # socketcall(call, args *): args unreadable
        asm.label(f"{tag}.socketcall")
        asm.op(_LD_W_ABS, _arg_low(0))
        asm.op(_JEQ_K, SYS_SOCKET, jt="deny")
        asm.op(_JEQ_K, SYS_SOCKETPAIR, jt="deny", jf="allow")


@functools.cache
def program(machine: str | None = None) -> bytes | None:
    """The filter for `machine` (default: this one, as uname says), or None when its
    architecture is not known here."""
    abis = MACHINES.get((machine or os.uname().machine).lower())
    if abis is None:
        return None
    asm = _Asm()
    asm.op(_LD_W_ABS, _ARCH)
    for i, abi in enumerate(abis):
        asm.op(_JEQ_K, abi.audit_arch, jt=f"abi{i}")
    asm.op(_RET_K, RET_KILL_PROCESS)               # a convention the filter cannot read
    for i, abi in enumerate(abis):
        _abi_block(asm, abi, f"abi{i}")
    asm.label("allow")
    asm.op(_RET_K, RET_ALLOW)
    asm.label("deny")
    asm.op(_RET_K, RET_EPERM)
    return asm.bytes()


def program_fd(code: bytes) -> int:
    """A descriptor bubblewrap reads the program from (`--seccomp FD`): an anonymous memory
    file at offset 0, so nothing is left on disk and no pipe can fill up. The caller passes it
    to the child (pass_fds) and closes it once the child has started."""
    fd = os.memfd_create("bantam-seccomp", os.MFD_CLOEXEC)
    try:
        os.write(fd, code)
        os.lseek(fd, 0, os.SEEK_SET)
    except OSError:
        os.close(fd)
        raise
    return fd
