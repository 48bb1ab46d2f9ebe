"""A tuning candidate's settings (issue 22): the request with the candidate's variation over it.

One rule for every host that launches a candidate: the measuring host plans each candidate with it (module
tune_plan) and a host of tuner_group builds the group's winner over its own request with it (filter
tune_settings), so both launch the same settings. A variation is {changes, env}: a change of None removes
that setting (the default space's CUDA-graph candidates clear the request's graph settings that way), any
other value replaces it whole; env is laid over the request's env. Pure functions: no Ansible, no I/O.
"""

from __future__ import annotations


def settings_of(request: dict, variation: dict) -> dict:
    """The request with the variation's changes over it (None removes a setting) and its env merged in."""
    settings = dict(request)
    for key, value in (variation.get("changes") or {}).items():
        if value is None:
            settings.pop(key, None)
        else:
            settings[key] = value
    if variation.get("env"):
        settings["env"] = {**(settings.get("env") or {}), **variation["env"]}
    return settings
