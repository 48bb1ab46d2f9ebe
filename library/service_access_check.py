#!/usr/bin/python
# Copyright: (c) 2026, epforge developers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Ansible module: can a service account reach these files? Checked before the account or its unit exists."""

from __future__ import annotations

DOCUMENTATION = r"""
---
module: service_access_check
short_description: Check that a service account can run or read paths, before the account is created
description:
  - A server run as an unprivileged account must be able to execute its env's python and read its files. A
    python under a directory that account cannot enter (a pyenv python in root's 0700 home, say) fails only
    at launch, after the account, its directories and its unit were created, with a bare "Permission
    denied". This module tells it before any of that, naming the directory that blocks and its mode.
  - For each path, every directory on the way to it (and to each hop of a symlink chain, and to the file it
    resolves to) must be searchable (x) by the account, and the path itself readable (r), and executable
    (x) when O(execute) is true.
  - The account's classes are read from the system when it exists (its uid, primary and supplementary
    groups); an account that does not exist yet is neither the owner nor a member of any group but
    O(group) when that group exists, so the "other" bits (and O(group)'s) decide. POSIX ACLs are not read.
  - With O(home), an account that exists with another home and has processes running is refused - C(usermod)
    cannot move the home of an account in use, and a changed home means the settings changed under a running
    service (C(epforge_state_dir) changed while the server runs). The refusal names both homes, the processes
    and what to do; an account without processes may move (C(usermod -d) does it).
  - Reads only; the same answer in check mode.
options:
  user:
    description: The service account (it may not exist yet).
    type: str
    required: true
  group:
    description: The account's primary group (it may not exist yet).
    type: str
  paths:
    description: Files the account must reach (the env's python first).
    type: list
    elements: path
    required: true
  execute:
    description: Whether the paths must be executable too (a python), not only readable.
    type: bool
    default: true
  purpose:
    description: What the account needs the paths for, worded into the failure message.
    type: str
    default: run the server
  home:
    description:
      - The home the account is about to be given (the task after this one). Refused when the account exists
        with another home and processes run as it. Empty - not checked.
    type: path
    default: ""
  home_hint:
    description: What to do instead, appended to the refusal of O(home) (how to stop the running service).
    type: str
    default: >-
      stop what runs as the account first, with the settings it was started with, then run again (or keep
      the previous home)
extends_documentation_fragment:
  - epforge.ep.attributes
  - epforge.ep.attributes.read_only
author: epforge developers (@epforge)
"""

EXAMPLES = r"""
- name: The service account can run the env's python
  epforge.ep.service_access_check:
    user: sglang
    group: sglang
    paths: [/opt/ml-env/bin/python]
"""

RETURN = r"""
blocked:
  description: >-
    Each path the account cannot reach, with the first place that blocks it
    (path, mode, owner, needs).
  returned: always
  type: list
  elements: dict
account:
  description: The classes the account was judged by (uid, gids, exists), and its home when it exists.
  returned: always
  type: dict
running:
  description: Pids of the processes running as the account, when O(home) differs from its home.
  returned: when O(home) is set
  type: list
  elements: int
"""

import grp
import os
import pwd
import stat

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.epforge.ep.plugins.module_utils.watch import binary_paths

READ = 4
WRITE = 2
EXECUTE = 1


def account_classes(user: str, group: str | None) -> dict:
    """The uid and gids the kernel would check the account by (None uid when it does not exist yet)."""
    try:
        entry = pwd.getpwnam(user)
    except KeyError:
        gids = []
        if group:
            try:
                gids.append(grp.getgrnam(group).gr_gid)
            except KeyError:
                pass
        return {"exists": False, "uid": None, "gids": gids}
    return {
        "exists": True,
        "uid": entry.pw_uid,
        "gids": sorted(set(os.getgrouplist(user, entry.pw_gid))),
        "home": entry.pw_dir,
    }


def processes_of(uid: int) -> list[int]:
    """Pids of the processes whose real uid is uid (what usermod refuses to move a home under)."""
    pids = []
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            with open(f"/proc/{name}/status", encoding="ascii", errors="replace") as handle:
                for line in handle:
                    if line.startswith("Uid:"):
                        if int(line.split()[1]) == uid:
                            pids.append(int(name))
                        break
        except (OSError, ValueError, IndexError):  # gone meanwhile
            continue
    return sorted(pids)


def allowed(st: os.stat_result, account: dict, need: int) -> bool:
    """Whether the account has `need` (bits of rwx) on a file of this stat, by the class that applies."""
    if account["uid"] == 0:
        return True
    if account["uid"] is not None and st.st_uid == account["uid"]:
        bits = (st.st_mode >> 6) & 7
    elif st.st_gid in account["gids"]:
        bits = (st.st_mode >> 3) & 7
    else:
        bits = st.st_mode & 7
    return bits & need == need


def describe_need(need: int) -> str:
    return "".join(letter for bit, letter in ((READ, "r"), (WRITE, "w"), (EXECUTE, "x")) if need & bit)


def first_block(path: str, account: dict, need: int) -> dict | None:
    """The first directory on the way to path that the account cannot search, or path itself when it lacks
    `need` on it; None when it can reach it."""
    absolute = os.path.abspath(path)
    parts = absolute.split(os.sep)[1:]
    current = os.sep
    for part in parts[:-1]:
        current = os.path.join(current, part)
        block = judge(current, account, EXECUTE)
        if block:
            return block
    return judge(absolute, account, need)


def judge(path: str, account: dict, need: int) -> dict | None:
    try:
        st = os.stat(path)
    except OSError as exc:
        return {"path": path, "mode": "", "owner": "", "needs": describe_need(need), "error": exc.strerror}
    if allowed(st, account, need):
        return None
    try:
        owner = pwd.getpwuid(st.st_uid).pw_name
    except KeyError:
        owner = str(st.st_uid)
    return {"path": path, "mode": oct(stat.S_IMODE(st.st_mode)), "owner": owner, "needs": describe_need(need)}


ARGUMENT_SPEC = {
    "user": {"type": "str", "required": True},
    "group": {"type": "str"},
    "paths": {"type": "list", "elements": "path", "required": True},
    "execute": {"type": "bool", "default": True},
    "purpose": {"type": "str", "default": "run the server"},
    "home": {"type": "path", "default": ""},
    "home_hint": {
        "type": "str",
        "default": "stop what runs as the account first, with the settings it was started with, then "
        "run again (or keep the previous home)",
    },
}


def main() -> None:
    module = AnsibleModule(
        argument_spec=ARGUMENT_SPEC,
        supports_check_mode=True,
    )
    p = module.params
    account = account_classes(p["user"], p["group"])
    need = READ | (EXECUTE if p["execute"] else 0)
    blocked = []
    for path in p["paths"]:
        # the link chain too: each hop's directory must be searchable, the last hop is the file itself
        for hop in binary_paths(path):
            block = first_block(hop, account, need if hop == os.path.realpath(path) else 0)
            if block:
                blocked.append({"for": path, **block})
                break
    result = {"changed": False, "blocked": blocked, "account": account}
    if blocked:
        words = "; ".join(
            f"{b['for']}: {b['path']} ({b.get('error') or 'mode ' + b['mode'] + ', owner ' + b['owner']}) "
            f"does not give it {b['needs']}"
            for b in blocked
        )
        module.fail_json(
            msg=f"the service account {p['user']!r} could not {p['purpose']}: {words}. Nothing was created: "
            "put the env where the account can reach it (e.g. under /opt) or grant it access (o+x on the "
            "directories, o+rx on the files)",
            **result,
        )
    moving = (
        p["home"] and account["exists"] and os.path.normpath(account["home"]) != os.path.normpath(p["home"])
    )
    if p["home"]:
        result["running"] = processes_of(account["uid"]) if moving else []
    if result.get("running"):
        shown = ", ".join(str(pid) for pid in result["running"][:5])
        module.fail_json(
            msg=f"the service account {p['user']!r} has the home {account['home']} and would get "
            f"{p['home']}, but processes run as it (pid {shown}): usermod cannot move the home of an account "
            f"in use. Nothing was changed: {p['home_hint']}",
            **result,
        )
    module.exit_json(**result)


if __name__ == "__main__":
    main()
