"""cuda_extension_plan is a probe: its answer is reused while nothing it depends on changed.

See epforge_probe_cache.py; the module in library/ holds the verdict, its docs and its `watch` list.
"""

from ansible.plugins.loader import action_loader

ActionModule = action_loader.get("epforge_probe_cache", class_only=True)
