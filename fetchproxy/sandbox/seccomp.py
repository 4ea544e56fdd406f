"""A seccomp filter that refuses the build the two terminal-input ioctls, built without I/O.

``TIOCSTI`` pushes a byte into a terminal's input queue, as if typed; ``TIOCLINUX`` (a virtual
console's) can paste its selection there. The build has no terminal but its own pty (see
``terminal.py``), so neither could reach the user's; the filter is the second wall, for any
descriptor the build might get hold of all the same. Everything else passes.

The program is classic BPF over ``struct seccomp_data`` (``nr`` at 0, ``arch`` at 4, the
arguments from 16, 8 bytes each): for each ABI the machine runs (x86_64 runs i386 and x32
code too; aarch64 runs arm), ``ioctl`` with either request number is answered EPERM. The
request is an ``unsigned int``: the kernel ignores the argument's upper half, so the filter
compares the lower one. The supervisor installs it in the build's process before ``exec``
(``linux.install_seccomp_filter``).
"""

from __future__ import annotations

import struct

TIOCSTI = 0x5412
TIOCLINUX = 0x541C
_EPERM = 1

_LD_W_ABS = 0x20  # BPF_LD | BPF_W | BPF_ABS
_JEQ_K = 0x15  # BPF_JMP | BPF_JEQ | BPF_K
_RET_K = 0x06  # BPF_RET | BPF_K
_RET_ALLOW = 0x7FFF0000
_RET_ERRNO = 0x00050000
_OFFSET_NR = 0
_OFFSET_ARCH = 4
_OFFSET_REQUEST = 24  # args[1], its lower half on a little-endian machine

_X32 = 0x40000000
# ABIs per machine (os.uname().machine): (AUDIT_ARCH_*, ioctl's system call numbers).
ABIS: dict[str, tuple[tuple[int, tuple[int, ...]], ...]] = {
    "x86_64": ((0xC000003E, (16, _X32 | 514)), (0x40000003, (54,))),
    "aarch64": ((0xC00000B7, (29,)), (0x40000028, (54,))),
}


def _instruction(code: int, k: int, true: int = 0, false: int = 0) -> bytes:
    return struct.pack("=HBBI", code, true, false, k)


def tty_input_filter(machine: str) -> bytes | None:
    """The filter for ``machine``; None for a machine whose system call numbers are not here."""
    abis = ABIS.get(machine)
    if abis is None:
        return None
    # Laid out back to front, so that every jump's target (always forward) is known.
    deny = [_instruction(_RET_K, _RET_ERRNO | _EPERM)]
    check = [
        _instruction(_LD_W_ABS, _OFFSET_REQUEST),
        _instruction(_JEQ_K, TIOCSTI, true=2),
        _instruction(_JEQ_K, TIOCLINUX, true=1),
        _instruction(_RET_K, _RET_ALLOW),
    ]
    tail = check + deny  # every ABI's block jumps to ``check`` when the call is ioctl
    blocks: list[bytes] = []
    for _arch, numbers in reversed(abis):
        block = [_instruction(_LD_W_ABS, _OFFSET_NR)]
        for index, number in enumerate(numbers):
            # to ``check``: past the rest of this block (numbers, allow) and the blocks after it
            after = len(numbers) - index - 1 + 1 + len(blocks)
            block.append(_instruction(_JEQ_K, number, true=after))
        block.append(_instruction(_RET_K, _RET_ALLOW))
        blocks = block + blocks
    # The dispatch: one comparison per ABI, jumping to its block; an unknown ABI is allowed
    # (the kernel runs no other on this machine).
    starts = [0]
    for _arch, numbers in abis[:-1]:
        starts.append(starts[-1] + len(numbers) + 2)
    dispatch = [_instruction(_LD_W_ABS, _OFFSET_ARCH)]
    count = len(abis)
    for index, (arch, _numbers) in enumerate(abis):
        rest = count - index  # the comparisons after this one, and the allow
        dispatch.append(_instruction(_JEQ_K, arch, true=rest + starts[index]))
    dispatch.append(_instruction(_RET_K, _RET_ALLOW))
    return b"".join(dispatch + blocks + tail)
