"""What a GPU server does that the unit's sandbox must allow, tried from inside that sandbox.

verify.yml runs this as a copy of the server's unit (same User=, same hardening, same ReadWritePaths and
DeviceAllow; only ExecStart and Type differ), with the server's own python. It prints one JSON object: for
each attempt "ok" or the errno name it failed with. No GPU here, so CUDA itself is not tried; what the
CUDA driver, NCCL, Triton and torch ask of the kernel is: W+X memory (JIT), /dev/shm (NCCL, torch
shared memory), a writable HOME cache (Triton, FlashInfer, DeepGEMM), pidfd_getfd (cuMem POSIX-fd
exchange), CPU and NUMA placement, memory locking, the socket families NCCL and ZMQ use, /proc.
"""

import _posixshmem
import ctypes
import errno
import json
import mmap
import os
import platform
import socket
import subprocess
import sys
import tempfile

LIBC = ctypes.CDLL(None, use_errno=True)
# Numbers that differ per architecture (pidfd_open 434 and pidfd_getfd 438 are the same on both).
SET_MEMPOLICY = {"x86_64": 238, "aarch64": 237}.get(platform.machine())
PIDFD_GETFD = 438
CLONE_NEWUSER = 0x10000000
READ_IMPLIES_EXEC = 0x0400000
# verify.yml leaves it in the host's /tmp: a private /tmp does not show it.
HOST_MARKER = "/tmp/epforge-host-marker"  # noqa: S108


def attempt(action):
    """'ok', or the errno name (EPERM, EROFS, ...) the action failed with."""
    try:
        action()
    except OSError as exc:
        return errno.errorcode.get(exc.errno, str(exc.errno))
    return "ok"


def libc_call(name, *args):
    def call():
        if getattr(LIBC, name)(*args) == -1:
            number = ctypes.get_errno()
            raise OSError(number, os.strerror(number))

    return call


def write_and_remove(path):
    def action():
        os.makedirs(os.path.dirname(path), exist_ok=True)
        with open(path, "w") as handle:
            handle.write("x")
        os.unlink(path)

    return action


def wx_mapping():
    mmap.mmap(-1, 4096, prot=mmap.PROT_READ | mmap.PROT_WRITE | mmap.PROT_EXEC).close()


def posix_shm():
    """shm_open + mmap, as NCCL's and torch's shared memory (multiprocessing.shared_memory would leave its
    resource tracker process behind, which the oneshot unit then waits for)."""
    name = f"/epforge-sandbox-shm-{os.getpid()}"
    fd = _posixshmem.shm_open(name, os.O_CREAT | os.O_EXCL | os.O_RDWR, mode=0o600)
    try:
        os.ftruncate(fd, 1 << 20)
        with mmap.mmap(fd, 1 << 20) as segment:
            segment[0] = 1
    finally:
        os.close(fd)
        _posixshmem.shm_unlink(name)


def pidfd_getfd():
    """Duplicate a descriptor of another process, as cuMem POSIX-fd exchanges do between ranks."""
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"], stdin=subprocess.PIPE)
    try:
        pidfd = os.pidfd_open(child.pid)
        try:
            fd = LIBC.syscall(PIDFD_GETFD, pidfd, 0, 0)
            if fd < 0:
                number = ctypes.get_errno()
                raise OSError(number, os.strerror(number))
            os.close(fd)
        finally:
            os.close(pidfd)
    finally:
        child.kill()
        child.wait()


def set_mempolicy():
    if SET_MEMPOLICY is None:
        raise OSError(errno.ENOSYS, "unknown architecture")
    libc_call("syscall", SET_MEMPOLICY, 0, None, 0)()


def mlock():
    buf = ctypes.create_string_buffer(4096)
    libc_call("mlock", buf, ctypes.c_size_t(4096))()
    libc_call("munlock", buf, ctypes.c_size_t(4096))()


def open_socket(family, kind, proto=0):
    def action():
        socket.socket(family, kind, proto).close()

    return action


def read_file(path):
    def action():
        with open(path, "rb") as handle:
            handle.read(4096)

    return action


def status_fields():
    with open("/proc/self/status") as handle:
        fields = dict(line.split(":", 1) for line in handle if ":" in line)
    return {key: fields.get(key, "").strip() for key in ("NoNewPrivs", "Seccomp", "CapBnd", "CapEff")}


home = os.path.expanduser("~")
env_prefix = sys.prefix
result = {
    "uid": os.getuid(),
    "home": home,
    "status": status_fields(),
    "tmp_is_private": not os.path.exists(HOST_MARKER),
    "uid_map": open("/proc/self/uid_map").read().split("\n")[0].split(),
    "allowed": {
        "wx_memory": attempt(wx_mapping),
        "dev_shm_file": attempt(write_and_remove(f"/dev/shm/epforge-sandbox-{os.getpid()}")),  # noqa: S108
        "posix_shm": attempt(posix_shm),
        "home_cache": attempt(write_and_remove(f"{home}/.cache/epforge-sandbox-check/probe")),
        "tmp": attempt(lambda: tempfile.TemporaryFile(dir="/tmp").close()),
        "env_python_read": attempt(read_file(os.path.join(os.path.dirname(os.__file__), "os.py"))),
        "proc_meminfo": attempt(read_file("/proc/meminfo")),
        "proc_cpuinfo": attempt(read_file("/proc/cpuinfo")),
        "sys_read": attempt(lambda: os.listdir("/sys/devices/system/node")),
        "pidfd_getfd": attempt(pidfd_getfd),
        "sched_setaffinity": attempt(lambda: os.sched_setaffinity(0, os.sched_getaffinity(0))),
        "set_mempolicy": attempt(set_mempolicy),
        "mlock": attempt(mlock),
        "af_inet": attempt(open_socket(socket.AF_INET, socket.SOCK_STREAM)),
        "af_inet6": attempt(open_socket(socket.AF_INET6, socket.SOCK_STREAM)),
        "af_unix": attempt(open_socket(socket.AF_UNIX, socket.SOCK_STREAM)),
        "af_netlink": attempt(open_socket(socket.AF_NETLINK, socket.SOCK_RAW, 0)),
        "dev_null": attempt(read_file("/dev/null")),
    },
    "refused": {
        "write_etc": attempt(write_and_remove("/etc/epforge-sandbox-probe")),
        "write_env": attempt(write_and_remove(os.path.join(env_prefix, "epforge-sandbox-probe"))),
        "write_home_dirs": attempt(write_and_remove("/home/epforge-sandbox-probe")),
        "personality": attempt(libc_call("personality", READ_IMPLIES_EXEC)),
        "af_packet": attempt(open_socket(socket.AF_PACKET, socket.SOCK_DGRAM)),
        # last: were it allowed, the process would go on in a new user namespace
        "unshare_user": attempt(libc_call("unshare", CLONE_NEWUSER)),
    },
}
print(json.dumps(result))
