"""The cluster's MUNGE key on one host: keep it, generate it once, or write the copy handed in on stdin.

Run by the munge role as ``python3 -c <this file> ensure|write PATH [BYTES] [--check]`` (no file is installed on
the node). It never prints the key: its one line of output is JSON with ``changed`` and ``state``, the key file's
``<sha1> <mode> <owner> <group>`` as clusterforge_file_probe reports it (a SHA-1 of 1024 random bytes says nothing
about them), so the role compares hosts without reading the key.

ensure PATH BYTES   keep a key of at least BYTES bytes (mode and owner set to 0400 munge:munge); otherwise write
                    BYTES bytes from the kernel's random source (os.urandom, getrandom(2)) in its place
write PATH          write the key given base64-encoded on stdin (the key host's), replacing what is there
--check             report what would change and write nothing
"""

import base64
import grp
import hashlib
import json
import os
import pwd
import sys


def state(path):
    try:
        st = os.lstat(path)
        with open(path, "rb") as fh:
            digest = hashlib.sha1(fh.read()).hexdigest()
    except OSError:
        return ""
    try:
        owner = pwd.getpwuid(st.st_uid).pw_name
    except KeyError:
        owner = "UNKNOWN"
    try:
        group = grp.getgrgid(st.st_gid).gr_name
    except KeyError:
        group = "UNKNOWN"
    return f"{digest} {st.st_mode & 0o7777:o} {owner} {group}"


def put(path, data):
    munge = pwd.getpwnam("munge")
    tmp = f"{path}.clusterforge-new"
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW, 0o400)
    try:
        os.fchown(fd, munge.pw_uid, munge.pw_gid)
        os.fchmod(fd, 0o400)
        os.write(fd, data)
        os.fsync(fd)
    finally:
        os.close(fd)
    os.replace(tmp, path)


def main(argv):
    check = "--check" in argv
    args = [a for a in argv if a != "--check"]
    action, path = args[0], args[1]
    before = state(path)
    changed = False
    if action == "ensure":
        size = int(args[2])
        try:
            current = os.path.getsize(path) if os.path.isfile(path) and not os.path.islink(path) else -1
        except OSError:
            current = -1
        if current < size:
            changed = True
            if not check:
                put(path, os.urandom(size))
        elif not before.endswith(" 400 munge munge"):
            changed = True
            if not check:
                munge = pwd.getpwnam("munge")
                os.chown(path, munge.pw_uid, munge.pw_gid, follow_symlinks=False)
                os.chmod(path, 0o400)
    elif action == "write":
        data = base64.b64decode(sys.stdin.read().strip(), validate=True)
        changed = True
        if not check:
            put(path, data)
    else:
        raise SystemExit(f"munge-key: unknown action {action!r} (ensure, write)")
    # in check mode a key that would be written has no state yet
    print(json.dumps({"changed": changed, "state": ("" if changed else before) if check else state(path)}))


main(sys.argv[1:])
