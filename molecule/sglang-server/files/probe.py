"""Evidence about the running SGLang stand-in server, gathered in one pass inside the test host.

Reads the API key on stdin (so it is on no command line) and prints JSON that never holds the key:
booleans and counts about where the key is, plus the unit text, systemd's view, the owner of the main
process and the listening sockets."""

import glob
import json
import os
import pwd
import subprocess
import sys
import urllib.error
import urllib.request

KEY = sys.stdin.read().strip()
UNIT = "/etc/systemd/system/sglang-server.service"
ENV_FILE = "/etc/epforge/sglang-server.env"
LOG = "/var/log/epforge/sglang-server.log"
FACT = "/etc/ansible/facts.d/epforge_sglang_server.fact"
URL = "http://127.0.0.1:30000"


def read(path, mode="r"):
    with open(path, mode) as handle:
        return handle.read()


def status_of(url, key=None):
    headers = {"Authorization": f"Bearer {key}"} if key else {}
    request = urllib.request.Request(url, headers=headers)  # noqa: S310 - a fixed http:// URL
    try:
        with urllib.request.urlopen(request, timeout=10) as resp:  # noqa: S310
            return resp.status, json.loads(resp.read() or b"null")
    except urllib.error.HTTPError as exc:
        return exc.code, None


out = {"key_given": bool(KEY)}
show = subprocess.run(
    [
        "systemctl",
        "show",
        "sglang-server.service",
        "-p",
        "ActiveState",
        "-p",
        "MainPID",
        "-p",
        "User",
        "-p",
        "Restart",
    ],
    capture_output=True,
    text=True,
    check=True,
).stdout
out["show"] = dict(line.split("=", 1) for line in show.splitlines() if "=" in line)
main_pid = out["show"].get("MainPID", "0")
status = read(f"/proc/{main_pid}/status")
out["main_uid"] = int(next(line.split()[1] for line in status.splitlines() if line.startswith("Uid:")))
out["sglang_uid"] = pwd.getpwnam("sglang").pw_uid
unit = read(UNIT)
out["unit"] = unit if KEY not in unit else "<holds the key>"
out["unit_has_key"] = KEY in unit
stat = os.stat(ENV_FILE)
env_text = read(ENV_FILE)
out["env_file"] = {
    "mode": oct(stat.st_mode & 0o777),
    "uid": stat.st_uid,
    "has_key_line": f"EPFORGE_SGLANG_API_KEY={KEY}\n" in env_text,
    "has_nccl": "NCCL_P2P_LEVEL=SYS\n" in env_text,
    # every launch is offline (role model fetched the weights; SGLang never downloads at launch)
    "has_hf_offline": "HF_HUB_OFFLINE=1\n" in env_text,
}
environ = read(f"/proc/{main_pid}/environ", "rb").split(b"\0")
out["server_hf_offline"] = b"HF_HUB_OFFLINE=1" in environ
log = read(LOG)
out["log"] = {
    "has_key": KEY in log,
    "has_server_args": "server_args=" in log,
    "has_redacted": "<redacted>" in log,
}
fact = read(FACT)
out["fact_has_key"] = KEY in fact
out["fact"] = json.loads(fact)
hits = 0
for path in glob.glob("/proc/[0-9]*/cmdline"):
    if path == f"/proc/{os.getpid()}/cmdline":
        continue
    try:
        hits += KEY.encode() in read(path, "rb")
    except OSError:
        pass
out["cmdline_hits"] = hits
rows = [line.split() for line in read("/proc/net/tcp").splitlines()[1:]]
out["listen_30000"] = [row[1] for row in rows if row[3] == "0A" and row[1].endswith(":7530")]
out["models_status"], models = status_of(URL + "/v1/models", KEY)
out["model_ids"] = [m["id"] for m in (models or {}).get("data", [])]
out["models_status_without_key"], _ = status_of(URL + "/v1/models")
print(json.dumps(out))
