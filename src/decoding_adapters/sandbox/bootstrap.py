"""The in-sandbox bootstrap: sets up one run's namespaces, filesystem, limits and uid, then execs the program.

Not imported to be used: :mod:`~decoding_adapters.sandbox.runner` reads this file's source and runs it as
``python -I -S -c <source> <settings...>`` in a fresh single-threaded interpreter, in the run's
throw-away directory, with the minimal environment (importing it does nothing). The settings are
positional, in the order of :data:`SETTINGS`. Process tree::

    bootstrap: enters namespaces, reports what worked, waits for init
      init (pid 1 of the new PID namespace if any): builds the private filesystem, reaps orphans,
      reports the program's status; its exit makes the kernel kill whatever is left in the namespace
        program: limits, uid switch, syscall filter, exec(python main.py)

Fail closed: a layer named in the ``required`` setting that cannot be set up stops the run before
the program starts (a "refused" status line names it); other layers are best effort and reported.

Status lines ("kind<TAB>key=value<TAB>...") go to a pipe of their own, so the program's stdout and
stderr stay untouched. The fast path imports neither ctypes nor json (they pull in re and enum:
12 ms per run, a fifth of a run): libc is called through ``_ctypes``, the C core of ctypes.

Why a bootstrap script rather than ``preexec_fn``: ``preexec_fn`` runs Python between ``fork`` and
``exec`` in a copy of a possibly multi-threaded parent, where a lock held by another thread (the
import lock, the allocator's, logging's) can deadlock the child; CPython documents it as unsafe
with threads. Instead the parent only forks and execs (thread-safe ``_posixsubprocess``), and a
fresh single-threaded interpreter runs this script, which sets up namespaces, mounts, limits, the
uid and the syscall filter and then ``exec``s the interpreter on the user's file. Many runs can go
in parallel. bubblewrap was considered for the mounts: this script does the same work with the
namespaces it already enters (no extra exec, no dependency a fresh CI machine lacks).
"""

import os
import resource
import stat
import sys
import time

SETTINGS = (
    "fd",  # the status pipe's write end
    "python",  # the interpreter that runs main.py
    "uid",  # the unprivileged uid of the program, or -1 to keep the caller's
    "net",  # "1": a network namespace of its own
    "private_fs",  # "1": a mount namespace with the reduced read-only root
    "cpu_s",  # RLIMIT_CPU soft limit (the hard limit is one more)
    "as_bytes",  # RLIMIT_AS
    "fsize_bytes",  # RLIMIT_FSIZE
    "nproc",  # RLIMIT_NPROC
    "nofile",  # RLIMIT_NOFILE
    "tmpfs_bytes",  # size of the run's scratch tmpfs
    "cgroup_procs",  # ":"-separated cgroup.procs files to join ("" for none)
    "ro_paths",  # ":"-separated host paths shown read-only
    "hidden_paths",  # ":"-separated host directories shown empty (site-packages)
    "masked_proc",  # ":"-separated entries under /proc shown empty
    "syscall_filter",  # seccomp BPF program as hex ("" for none)
    "required",  # ","-separated layers without which the program must not run (see refuse)
)
INTEGERS = ("fd", "uid", "cpu_s", "as_bytes", "fsize_bytes", "nproc", "nofile", "tmpfs_bytes")

CLONE_NEWUSER, CLONE_NEWNET, CLONE_NEWPID = 0x10000000, 0x40000000, 0x20000000
CLONE_NEWNS, CLONE_NEWIPC, CLONE_NEWUTS, CLONE_NEWCGROUP = 0x00020000, 0x08000000, 0x04000000, 0x02000000
CLONE_NEWTIME = 0x00000080
MS_RDONLY, MS_NOSUID, MS_NODEV, MS_NOEXEC = 1, 2, 4, 8
MS_REMOUNT, MS_BIND, MS_REC, MS_PRIVATE = 32, 4096, 16384, 1 << 18
MNT_DETACH = 2
PR_SET_PDEATHSIG, PR_SET_NO_NEW_PRIVS, PR_SET_SECCOMP, SECCOMP_MODE_FILTER = 1, 38, 22, 2
SIGKILL = 9
SIGPENDING = 1024
"""Queued signals per uid, which also caps POSIX timers (each holds one queue entry): kernel
memory outside the run's control group, ~96,000 timers (~30 MiB) per uid by default."""
MSGQUEUE_BYTES = 64 * 1024
"""Bytes of POSIX message queues per uid (default 800 KiB, also kernel memory)."""
PIVOT_ROOT = {"x86_64": 155, "aarch64": 41, "riscv64": 41}

try:
    import _ctypes

    _LIBC = _ctypes.dlopen(None)

    def libc(name, *args):
        """Call a libc function (ints and bytes arguments); its int result."""
        return _ctypes.call_function(_ctypes.dlsym(_LIBC, name), args)

    class _Char(_ctypes._SimpleCData):
        _type_ = "c"

    def pinned(data):
        """(a C copy of ``data`` to keep alive, its address)."""
        array = type("Bytes", (_ctypes.Array,), {"_type_": _Char, "_length_": len(data)}).from_buffer_copy(data)
        return array, _ctypes.addressof(array)

except (ImportError, AttributeError):
    import ctypes

    def libc(name, *args):
        """Call a libc function (ints and bytes arguments); its int result."""
        return getattr(ctypes.CDLL(None), name)(*args)

    def pinned(data):
        """(a C copy of ``data`` to keep alive, its address)."""
        array = ctypes.create_string_buffer(data, len(data))
        return array, ctypes.addressof(array)


class Settings:
    """The run's settings, from the command line (see :data:`SETTINGS`)."""

    def __init__(self, argv):
        if len(argv) != len(SETTINGS):
            raise ValueError("expected %d settings, got %d" % (len(SETTINGS), len(argv)))
        for name, value in zip(SETTINGS, argv):
            setattr(self, name, int(value) if name in INTEGERS else value)


def report(s, kind, **fields):
    """One status line on the status pipe."""
    items = [kind] + ["%s=%s" % (k, str(v).replace("\t", " ").replace("\n", " ")) for k, v in fields.items()]
    os.write(s.fd, ("\t".join(items) + "\n").encode())


def refuse(s, layer, error):
    """Stop here, the program never having run: a required layer could not be set up."""
    report(s, "refused", layer=layer, error=error or "refused")
    os._exit(126)


def required(s, layer):
    return layer in s.required.split(",")


def errno_of(name, *args):
    """Why the libc call ``name(*args)`` fails (only on the rare failure path: it repeats the call
    through ctypes to read errno)."""
    import ctypes

    lib = ctypes.CDLL(None, use_errno=True)
    return "" if getattr(lib, name)(*args) == 0 else (os.strerror(ctypes.get_errno()) or "refused")


def unshare(flag):
    """"" on success, else the reason."""
    return "" if libc("unshare", flag) == 0 else errno_of("unshare", flag)


def write(path, text):
    with open(path, "w") as f:
        f.write(text)


def user_namespace():
    """Unprivileged callers may create namespaces inside a user namespace of their own."""
    my_uid, my_gid = os.getuid(), os.getgid()
    error = unshare(CLONE_NEWUSER)
    if not error:
        write("/proc/self/setgroups", "deny")
        write("/proc/self/uid_map", "%d %d 1" % (my_uid, my_uid))
        write("/proc/self/gid_map", "%d %d 1" % (my_gid, my_gid))
    return error


def hide_host_names():
    """Best effort: a host name of its own (not the machine's), and the control-group paths seen
    from the run's own group (not the host's hierarchy, which names the caller's pid)."""
    if unshare(CLONE_NEWUTS) == "":
        libc("sethostname", b"sandbox", 7)
    unshare(CLONE_NEWCGROUP)  # after join_cgroups: the run's group becomes its root


def hide_host_uptime():
    """Best effort: a time namespace whose boot and monotonic clocks start near zero, so neither
    ``sysinfo()`` nor ``CLOCK_BOOTTIME`` tells how long the host has been up. It applies to the
    processes forked after it (init and the program); offsets must be set before the first."""
    if unshare(CLONE_NEWTIME) != "":
        return
    offsets = ["%s %d 0" % (name, 1 - int(time.clock_gettime(clock)))
               for name, clock in (("monotonic", time.CLOCK_MONOTONIC), ("boottime", time.CLOCK_BOOTTIME))]
    try:
        write("/proc/self/timens_offsets", "\n".join(offsets) + "\n")
    except OSError:
        pass  # the children keep the host's clocks


def join_cgroups(s):
    """Join the run's control groups (made by the caller) before any fork, so every process of
    the run is in them and counts against the whole run's memory and process limits."""
    try:
        for procs in s.cgroup_procs.split(":"):
            if procs:
                write(procs, "0")
        return ""
    except OSError as exc:
        return str(exc)


# ---- the private filesystem (in init, pid 1 of the run's PID namespace)


def mount(source, target, fstype, flags, data):
    args = (source and source.encode(), target.encode(), fstype and fstype.encode(), flags, data and data.encode())
    if libc("mount", *args) != 0:
        raise OSError("mount %s on %s: %s" % (source or fstype, target, errno_of("mount", *args)))


def bind_read_only(source, target):
    mount(source, target, None, MS_BIND | MS_REC, None)
    # Remounting read-only must keep the flags the host locked on that mount (nosuid, ...).
    kept = os.statvfs(source).f_flag & (MS_NOSUID | MS_NODEV | MS_NOEXEC)
    mount(None, target, None, MS_REMOUNT | MS_BIND | MS_RDONLY | kept, None)


def make_point(path, directory):
    os.makedirs(os.path.dirname(path), 0o755, exist_ok=True)
    if directory:
        os.makedirs(path, 0o755, exist_ok=True)
    elif not os.path.exists(path):
        open(path, "w").close()


def show_read_only(s, root):
    """The host's system directories and the interpreter's installation, read-only; the
    site-packages folders among them empty (the program gets the standard library only)."""
    for path in s.ro_paths.split(":"):
        if os.path.islink(path) and os.path.dirname(path) == "/":
            os.symlink(os.readlink(path), root + path)  # /bin -> usr/bin and friends
        elif os.path.isdir(path):
            make_point(root + path, True)
            bind_read_only(path, root + path)
        elif os.path.isfile(path):
            make_point(root + path, False)
            bind_read_only(path, root + path)
    for path in s.hidden_paths.split(":"):
        if path and os.path.isdir(root + path):
            mount("sandbox-hidden", root + path, "tmpfs", MS_RDONLY | MS_NOSUID | MS_NODEV | MS_NOEXEC,
                  "size=4k,nr_inodes=1,mode=755")


def scratch_space(s, root):
    """One small tmpfs backing /tmp, /var/tmp, /dev/shm and (later) the working directory, so
    their total is bounded and all of it vanishes with the run."""
    scratch = root + "/.scratch"
    make_point(scratch, True)
    mount("sandbox-tmp", scratch, "tmpfs", MS_NOSUID | MS_NODEV, "size=%d,nr_inodes=4096,mode=755" % s.tmpfs_bytes)
    for name, target in (("tmp", "/tmp"), ("var-tmp", "/var/tmp"), ("shm", "/dev/shm")):
        os.mkdir(scratch + "/" + name, 0o777)
        os.chmod(scratch + "/" + name, 0o1777)
        make_point(root + target, True)
        mount(scratch + "/" + name, root + target, None, MS_BIND, None)
    return scratch


def devices_and_proc(s, root):
    """A few device nodes, and a fresh /proc of the run's PID namespace whose entries about the
    host (its command line, load, memory, uptime, boot id, ...) read as empty."""
    null = "/dev/null"
    for name, minor in (("null", 3), ("zero", 5), ("full", 7), ("random", 8), ("urandom", 9)):
        path = root + "/dev/" + name
        os.makedirs(root + "/dev", 0o755, exist_ok=True)
        try:  # a node of our own: the host's devtmpfs (whose size gives away the host's RAM) stays unseen
            os.mknod(path, 0o666 | stat.S_IFCHR, os.makedev(1, minor))
            os.chmod(path, 0o666)
            if name == "null":
                null = path
        except OSError:  # no CAP_MKNOD (a user namespace): show the host's node
            make_point(path, False)
            mount("/dev/" + name, path, None, MS_BIND, None)
    for name, target in (("fd", "/proc/self/fd"), ("stdin", "/proc/self/fd/0"),
                         ("stdout", "/proc/self/fd/1"), ("stderr", "/proc/self/fd/2")):
        os.symlink(target, root + "/dev/" + name)
    make_point(root + "/proc", True)
    mount("proc", root + "/proc", "proc", MS_NOSUID | MS_NODEV | MS_NOEXEC, None)
    shown = []  # best effort: a kernel may refuse to cover some entry; the run says which
    for entry in s.masked_proc.split(":"):
        path = root + "/proc/" + entry
        if not entry or not os.path.lexists(path):
            continue
        try:
            if os.path.isdir(path):
                mount("sandbox-masked", path, "tmpfs", MS_RDONLY | MS_NOSUID | MS_NODEV | MS_NOEXEC,
                      "size=4k,nr_inodes=1,mode=555")
            else:
                mount(null, path, None, MS_BIND, None)  # reads as empty, writes vanish
        except OSError:
            shown.append(entry)
    return shown


def build_root(s, files):
    """A new root on a tiny tmpfs (see the helpers above); the run's ``files`` in the working
    directory; then pivot into it and drop the host's root."""
    workdir = os.getcwd()
    mount(None, "/", None, MS_REC | MS_PRIVATE, None)  # nothing we mount reaches the host
    root = workdir  # mount point for the new root (its files are already read)
    # Not nodev: it holds the device nodes made below (the program, unprivileged on a read-only
    # root, cannot add any).
    mount("sandbox-root", root, "tmpfs", MS_NOSUID, "size=1m,nr_inodes=1000,mode=755")
    show_read_only(s, root)
    scratch = scratch_space(s, root)
    shown = devices_and_proc(s, root)
    os.mkdir(scratch + "/work", 0o700)
    for name, text in files:
        with open(scratch + "/work/" + name, "wb") as f:
            f.write(text)
    if s.uid >= 0:
        os.chown(scratch + "/work", s.uid, s.uid)
    make_point(root + workdir, True)
    mount(scratch + "/work", root + workdir, None, MS_BIND, None)
    # Enter the new root and drop the old one (pivot_root(".", "."), then detach the old root).
    os.chdir(root)
    number = PIVOT_ROOT.get(os.uname().machine)
    if number is None or libc("syscall", number, b".", b".") != 0:
        raise OSError("pivot_root refused")
    if libc("umount2", b".", MNT_DETACH) != 0:
        raise OSError("could not detach the old root")
    os.chdir("/")
    libc("umount2", b"/.scratch", MNT_DETACH)  # its binds stay; the name goes
    os.rmdir("/.scratch")
    mount(None, "/", None, MS_REMOUNT | MS_BIND | MS_RDONLY | MS_NOSUID, None)
    os.chdir(workdir)
    return shown


def private_filesystem(s):
    """("", host /proc entries left visible) once the private root is in place, else (the
    reason, []): the run goes on without it."""
    files = []  # the run's files, read before the new root hides the working directory
    for name in os.listdir("."):
        with open(name, "rb") as f:
            files.append((name, f.read()))
    workdir = os.getcwd()
    try:
        return "", build_root(s, files)
    except OSError as exc:
        # Before pivot_root the half-built root sits on the working directory: detach it, so
        # the run goes on with the host's view (and its files) instead of failing.
        if os.getcwd() != "/" and libc("umount2", workdir.encode(), MNT_DETACH) == 0:
            os.chdir(workdir)
        return str(exc) or "refused", []


# ---- the program


def install_syscall_filter(s):
    """"" once the seccomp filter is installed (inherited by every descendant, kept across
    exec), else the reason. ``no_new_privs`` first: required without CAP_SYS_ADMIN, and it keeps
    set-uid programs from gaining privileges."""
    if not s.syscall_filter:
        return "not requested"
    program = bytes.fromhex(s.syscall_filter)
    keep, address = pinned(program)
    # struct sock_fprog {unsigned short len; (6 bytes of padding) struct sock_filter *filter;}
    fprog = (len(program) // 8).to_bytes(2, sys.byteorder) + bytes(6) + address.to_bytes(8, sys.byteorder)
    if libc("prctl", PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0:
        return "no_new_privs: " + errno_of("prctl", PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0)
    if libc("prctl", PR_SET_SECCOMP, SECCOMP_MODE_FILTER, fprog, 0, 0) != 0:
        return "seccomp: " + errno_of("prctl", PR_SET_SECCOMP, SECCOMP_MODE_FILTER, fprog, 0, 0)
    del keep  # the kernel copied the program
    return ""


def program(s):
    for which, soft, hard in [(resource.RLIMIT_CPU, s.cpu_s, s.cpu_s + 1),
                              (resource.RLIMIT_AS, s.as_bytes, s.as_bytes),
                              (resource.RLIMIT_FSIZE, s.fsize_bytes, s.fsize_bytes),
                              (resource.RLIMIT_NPROC, s.nproc, s.nproc),
                              (resource.RLIMIT_NOFILE, s.nofile, s.nofile),
                              (resource.RLIMIT_SIGPENDING, SIGPENDING, SIGPENDING),
                              (resource.RLIMIT_MSGQUEUE, MSGQUEUE_BYTES, MSGQUEUE_BYTES),
                              (resource.RLIMIT_CORE, 0, 0)]:
        resource.setrlimit(which, (soft, hard))
    if s.uid >= 0:
        os.setgroups([])
        os.setgid(s.uid)
        os.setuid(s.uid)
    libc("prctl", PR_SET_PDEATHSIG, SIGKILL, 0, 0, 0)  # after setuid, which clears it
    # Last, so the set-up above is not subject to it; the status pipe closes at exec.
    filter_error = install_syscall_filter(s)
    report(s, "seccomp", ok=int(not filter_error), error=filter_error)
    if filter_error and required(s, "seccomp"):
        refuse(s, "seccomp", filter_error)
    # -S: no site-packages (the program gets the standard library only), -s: no user site,
    # -B: no bytecode files. The environment is ours (see _minimal_env), so -E is not needed.
    os.execv(s.python, [s.python, "-S", "-s", "-B", "main.py"])


def init(s, child):
    """Reap every process that ends up here; report the program's status when it ends."""
    while True:
        pid, status = os.waitpid(-1, 0)
        if pid == child:
            report(s, "exit", status=status)
            os._exit(0)


def spawn(s, target):
    pid = os.fork()
    if pid == 0:
        try:
            target(s)
        except BaseException as exc:
            report(s, "setup_error", message="%s: %s" % (type(exc).__name__, exc))
        os._exit(127)
    return pid


def release_pipes():
    """Only the program keeps the output pipes, so the parent's EOF means the program is gone."""
    devnull = os.open(os.devnull, os.O_RDWR)
    for std in (0, 1, 2):
        os.dup2(devnull, std)


def start_init(s, fs_refused):
    libc("prctl", PR_SET_PDEATHSIG, SIGKILL, 0, 0, 0)  # die with the bootstrap
    fs_error, shown = (fs_refused, []) if fs_refused else private_filesystem(s)
    report(s, "fs", ok=int(not fs_error), error=fs_error, proc_shown=",".join(shown))
    if fs_error and required(s, "private_filesystem"):
        refuse(s, "private_filesystem", fs_error)
    child = spawn(s, program)
    release_pipes()
    init(s, child)


def main(s):
    os.set_inheritable(s.fd, False)  # closed by exec: the program cannot write status lines
    userns_error = user_namespace() if os.geteuid() != 0 else ""
    cgroup_error = join_cgroups(s)
    net_error = unshare(CLONE_NEWNET) if s.net == "1" else "not requested"
    # A private mount table, and System V IPC that dies with the run.
    mnt_error = unshare(CLONE_NEWNS | CLONE_NEWIPC) if s.private_fs == "1" else "not requested"
    if not mnt_error:
        hide_host_names()
        hide_host_uptime()
    pid_error = unshare(CLONE_NEWPID)  # applies to the next child
    report(s, "setup", uid=s.uid, net=int(not net_error), pid=int(not pid_error), mnt=int(not mnt_error),
           cgroup=int(bool(s.cgroup_procs) and not cgroup_error), net_error=net_error, pid_error=pid_error,
           mnt_error=mnt_error, cgroup_error=cgroup_error, userns_error=userns_error)
    failures = (("cgroup", cgroup_error or ("" if s.cgroup_procs else "no control group was made for the run")),
                ("network", net_error), ("pid_namespace", pid_error), ("private_filesystem", mnt_error))
    for layer, error in failures:
        if error and required(s, layer):
            refuse(s, layer, error)
    # The new /proc needs the PID namespace (else it would show the host's processes).
    fs_refused = mnt_error or ("needs a PID namespace" if pid_error else "")
    init_pid = spawn(s, lambda s: start_init(s, fs_refused))
    release_pipes()
    os.waitpid(init_pid, 0)


if __name__ == "__main__":
    _settings = Settings(sys.argv[1:])
    try:
        main(_settings)
    except BaseException as _exc:
        report(_settings, "setup_error", message="%s: %s" % (type(_exc).__name__, _exc))
        os._exit(127)
